// Command cosign is sigstore's cosign CLI, both major versions in one binary,
// for the tests of signed plugins (issue 31): cosign v3 signs with sigstore
// bundles attached by the OCI referrers API (or its tag-schema fallback),
// cosign v2 with tag-based signatures (`sha256-<hex>.sig`).
//
// It lives in realcluster's module so that the k8s.io, grpc, protobuf and
// OpenTelemetry packages it shares with the control plane compile once (one
// go.mod, one set of versions, one Go build cache entry).
//
// The major version is picked by the name it is run as (scripts/build-cosign.sh
// makes target/cosign/cosign2 and target/cosign/cosign3) or by a first
// argument "v2"/"v3". Upstream's main also registers the KMS providers
// (aws, azure, gcp, hashivault) and rewrites single-dash long flags; tests
// sign with key files and pass POSIX flags, so neither is done here.
//
//	cosign2 sign ...        cosign v2 sign ...   (cosign v2)
//	cosign3 sign ...        cosign v3 sign ...   (cosign v3, also the default)
//	cosign module-versions                       (the cosign module versions linked)
package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	cli2 "github.com/sigstore/cosign/v2/cmd/cosign/cli"
	errors2 "github.com/sigstore/cosign/v2/cmd/cosign/errors"
	cli3 "github.com/sigstore/cosign/v3/cmd/cosign/cli"
	errors3 "github.com/sigstore/cosign/v3/cmd/cosign/errors"
)

func main() {
	major := "v3"
	if strings.HasSuffix(filepath.Base(os.Args[0]), "2") {
		major = "v2"
	}
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "v2" || args[0] == "v3") {
		major, args = args[0], args[1:]
	}
	if len(args) > 0 && args[0] == "module-versions" {
		printModuleVersions()
		return
	}
	cmd := cli3.New()
	if major == "v2" {
		cmd = cli2.New()
	}
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		// As upstream's main: a CosignError carries the exit code of its kind
		// of failure (e.g. 12 for "no matching signatures"), others exit 1.
		log.Printf("error during command execution: %v", err)
		var e2 *errors2.CosignError
		var e3 *errors3.CosignError
		switch {
		case errors.As(err, &e3):
			os.Exit(e3.ExitCode())
		case errors.As(err, &e2):
			os.Exit(e2.ExitCode())
		}
		os.Exit(1)
	}
}

// printModuleVersions prints the cosign module versions this binary was built
// from (`cosign version` says "devel": cosign's release ldflags are not set).
func printModuleVersions() {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	for _, m := range bi.Deps {
		if strings.HasPrefix(m.Path, "github.com/sigstore/cosign/") {
			fmt.Printf("%s %s\n", m.Path, m.Version)
		}
	}
}
