package main

import (
	"errors"
	"fmt"
	"os"

	// Client auth plugins (exec, oidc), as upstream's cmd/helm imports them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
)

// helmMain runs Helm's own root command (helm.sh/helm/v4/pkg/cmd) with args,
// the way upstream's cmd/helm/helm.go does, and returns its exit code. Helm is
// linked into realcluster so that CI compiles and links the shared k8s.io
// dependency tree once (one Go build for the control plane and Helm).
func helmMain(args []string) int {
	// Upstream sets the field manager to "helm" explicitly so that the binary's
	// name (here "realcluster") does not leak into managedFields.
	kube.ManagedFieldsManager = "helm"

	cmd, err := helmcmd.NewRootCmd(os.Stdout, args, helmcmd.SetupLogging)
	if err != nil {
		fmt.Fprintf(os.Stderr, "realcluster helm: %v\n", err)
		return 1
	}
	// Upstream relies on cobra reading os.Args[1:]; ours start with "helm".
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		var cerr helmcmd.CommandError
		if errors.As(err, &cerr) {
			return cerr.ExitCode
		}
		return 1
	}
	return 0
}
