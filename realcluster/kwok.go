package main

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/spf13/pflag"

	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
	kwoksignals "sigs.k8s.io/kwok/pkg/utils/signals"
)

// stageFiles are the kwok Stages "up" gives kwok: kwok v0.8.0's defaults for
// Nodes and Pods (copied unchanged) and wasm-operator's failure stage. See
// stages/ and README.md.
//
//go:embed stages/*.yaml
var stageFiles embed.FS

// stagesYAML is every embedded stage, in file-name order, as one multi-document
// YAML stream (kwok's --config format).
func stagesYAML() ([]byte, error) {
	names, err := fs.Glob(stageFiles, "stages/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out bytes.Buffer
	for _, name := range names {
		data, err := stageFiles.ReadFile(name)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(bytes.TrimSpace(data))
		out.WriteString("\n")
	}
	return out.Bytes(), nil
}

// kwokMain runs kwok's controller as cmd/kwok of sigs.k8s.io/kwok does. kwok
// reads its global flags (--config, -v) from os.Args itself; "kwok", the
// subcommand's name, is a positional argument its flag set skips.
func kwokMain(args []string) int {
	// Kubernetes' packages linked into this binary register flags on pflag's
	// global set (verflag's --version of its own type among them), which
	// cobra merges into every command: kwok's command, whose --version is a
	// bool, then fails. This process runs kwok only, so kwok gets a clean set.
	pflag.CommandLine = pflag.NewFlagSet(os.Args[0], pflag.ExitOnError)

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := kwoksignals.SetupSignalContext()
	ctx, logger := kwoklog.InitFlags(ctx, flagset)
	ctx, err := kwokconfig.InitFlags(ctx, flagset)
	if err != nil {
		fmt.Fprint(os.Stderr, flagset.FlagUsages())
		logger.Error("Init config flags", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	command.SetArgs(args)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		return 1
	}
	return 0
}
