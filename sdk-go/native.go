//go:build !wasip1

package operator

// Outside WebAssembly (go vet, go test of a plugin's logic on the
// developer's machine) there is no host: log records go to stderr and
// cache reads fail.

import (
	"fmt"
	"os"
)

var levels = [...]string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

func hostLogString(level Level, msg string) {
	name := "LOG"
	if int(level) < len(levels) {
		name = levels[level]
	}
	fmt.Fprintf(os.Stderr, "%s %s\n", name, msg)
}

func cacheGet(apiVersion, kind, namespace, name string) (string, bool, error) {
	return "", false, CacheError("no host cache outside WebAssembly (GOOS=wasip1)")
}

func cacheList(apiVersion, kind, namespace, selector string) ([]string, error) {
	return nil, CacheError("no host cache outside WebAssembly (GOOS=wasip1)")
}
