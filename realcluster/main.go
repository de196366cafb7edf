// Command realcluster runs a real Kubernetes control plane (embedded etcd,
// kube-apiserver, kube-controller-manager, all built from pinned upstream
// releases) on loopback, for tests. See README.md.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	_ "time/tzdata" // for CronJob time zones, as upstream's main packages do

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric registration
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	cmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

const usage = `usage:
  realcluster up [--dir DIR] [--kubeconfig FILE] [--port N] [flags]   run a control plane (see "realcluster up --help")
  realcluster version                                                    print the pinned upstream versions
  realcluster helm ARGS...                                               run Helm v4 (e.g. "realcluster helm template ...")
internal (spawned by "up"):
  realcluster apiserver <kube-apiserver flags>
  realcluster controller-manager <kube-controller-manager flags>
  realcluster scheduler <kube-scheduler flags>
  realcluster kwok <kwok flags>
  realcluster reap <pid> <path>...
`

func main() {
	os.Exit(run(os.Args[1:]))
}

// run dispatches a subcommand and returns the process exit code. Each upstream
// component runs in its own process (re-exec of this binary): their global
// state (flags, klog, prometheus registries, the once-only signal handler of
// k8s.io/apiserver) is not meant to be shared.
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "up":
		return upMain(args[1:])
	case "apiserver", "kube-apiserver":
		cmd := apiserverapp.NewAPIServerCommand()
		cmd.SetArgs(args[1:])
		return cli.Run(cmd)
	case "controller-manager", "kube-controller-manager":
		cmd := cmapp.NewControllerManagerCommand()
		cmd.SetArgs(args[1:])
		return cli.Run(cmd)
	case "scheduler", "kube-scheduler":
		cmd := schedulerapp.NewSchedulerCommand()
		cmd.SetArgs(args[1:])
		return cli.Run(cmd)
	case "kwok":
		return kwokMain(args[1:])
	case "helm":
		return helmMain(args[1:])
	case "reap":
		return reapMain(args[1:])
	case "version", "--version":
		printVersions()
		return 0
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "realcluster: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

func printVersions() {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Println("realcluster: no build info")
		return
	}
	fmt.Printf("go %s\n", bi.GoVersion)
	for _, d := range bi.Deps {
		switch d.Path {
		case "k8s.io/kubernetes", "go.etcd.io/etcd/server/v3", "k8s.io/apiserver", "k8s.io/client-go", "sigs.k8s.io/kwok":
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}
			fmt.Printf("%s %s\n", d.Path, v)
		}
	}
}
