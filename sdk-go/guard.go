package operator

// Panics of the author's functions, on any target.

import (
	"fmt"
	"runtime"
	"strings"
)

// sdkPrefix starts the names of this package's functions.
const sdkPrefix = "wasm-operator.dev/sdk-go."

// guard runs fn: its error, or a panic it does not recover, becomes the
// call's failure (nil when fn succeeds).
func guard(function string, fn func() error) (failure *Failure) {
	defer func() {
		if v := recover(); v != nil {
			failure = panicFailure(function, v)
		}
	}()
	if err := fn(); err != nil {
		return asFailure(err)
	}
	return nil
}

// panicFailure is the transient failure of a recovered panic: its value and
// the innermost frame outside the runtime and this SDK. The stack goes to
// the host log. Called from guard's deferred function, while the panicking
// frames are still on the stack.
func panicFailure(function string, v any) *Failure {
	value := fmt.Sprint(v) // an error's Error()
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	var stack []string
	for {
		f, more := frames.Next()
		if f.Function == sdkPrefix+"guard" {
			break // the SDK's frames below the author's
		}
		if !strings.HasPrefix(f.Function, "runtime.") && !strings.HasPrefix(f.Function, sdkPrefix) {
			file := f.File[strings.LastIndexByte(f.File, '/')+1:]
			name := f.Function[strings.LastIndexByte(f.Function, '/')+1:]
			stack = append(stack, fmt.Sprintf("%s:%d in %s", file, f.Line, name))
		}
		if !more {
			break
		}
	}
	where := "an unknown line"
	if len(stack) > 0 {
		where = stack[0]
	}
	hostLogString(LevelError, fmt.Sprintf("%s panicked: %s; stack (innermost first): %s",
		function, value, strings.Join(stack, " <- ")))
	return &Failure{Message: fmt.Sprintf("panic: %s (at %s)", value, where)}
}
