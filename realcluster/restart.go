package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Restarting kube-apiserver while "up" runs, as an upgrade (SIGUSR1: SIGTERM,
// a graceful stop) or a crash (SIGUSR2: SIGKILL) would: the same flags, port,
// certificates and etcd; etcd and the other components keep running.

// apiserverRestartGrace is how long a kube-apiserver stopped for a restart
// has to exit after SIGTERM before it is SIGKILLed.
const apiserverRestartGrace = 20 * time.Second

// apiserverRestarter holds the running kube-apiserver and restarts it on
// request. Its fields are used by one goroutine (supervise's); a restart runs
// in a goroutine of its own and reports on done.
type apiserverRestarter struct {
	start   func() (*child, error)              // starts a kube-apiserver with the flags and log file of the first
	ready   func(context.Context, *child) error // waits until it is ready (its /readyz answers ok)
	grace   time.Duration                       // SIGTERM to SIGKILL
	timeout time.Duration                       // for the new kube-apiserver to be ready
	logf    func(format string, args ...any)

	current    *child             // the kube-apiserver (during a restart: the one being stopped)
	restarting bool               // a restart is in progress; its result comes on done
	done       chan restartResult // capacity 1
}

func newAPIServerRestarter(current *child, start func() (*child, error), ready func(context.Context, *child) error, timeout time.Duration) *apiserverRestarter {
	return &apiserverRestarter{
		start: start, ready: ready, grace: apiserverRestartGrace, timeout: timeout, logf: logf,
		current: current, done: make(chan restartResult, 1),
	}
}

type restartResult struct {
	child   *child        // the new kube-apiserver; nil if none was started
	elapsed time.Duration // from the signal to the new one's readiness
	err     error
}

// restartSignal is the signal a restart requested by s stops kube-apiserver
// with: SIGKILL for SIGUSR2 (a crash), SIGTERM for SIGUSR1 (a graceful stop).
func restartSignal(s os.Signal) syscall.Signal {
	if s == syscall.SIGUSR2 {
		return syscall.SIGKILL
	}
	return syscall.SIGTERM
}

// begin starts a restart in the background: stop the current kube-apiserver
// with sig (after a SIGTERM, SIGKILL if it has not exited within grace), start
// it again, wait until it is ready. It does nothing and returns false when a
// restart is in progress already. ctx cancels the wait for readiness (and a
// restart not yet past the stop). The result comes on done, for finish.
func (r *apiserverRestarter) begin(ctx context.Context, sig syscall.Signal) bool {
	if r.restarting {
		return false
	}
	r.restarting = true
	old := r.current
	go func() { r.done <- r.restart(ctx, old, sig) }()
	return true
}

func (r *apiserverRestarter) restart(ctx context.Context, old *child, sig syscall.Signal) restartResult {
	began := time.Now()
	old.stopWith(sig, r.grace)
	status := "exit status 0"
	if old.err != nil {
		status = old.err.Error()
	}
	r.logf("kube-apiserver stopped (%s) after %d ms, starting it again", status, time.Since(began).Milliseconds())
	if err := ctx.Err(); err != nil {
		return restartResult{err: err}
	}
	c, err := r.start()
	if err != nil {
		return restartResult{err: err}
	}
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.ready(rctx, c); err != nil {
		return restartResult{child: c, err: err}
	}
	return restartResult{child: c, elapsed: time.Since(began)}
}

// finish records the result of a restart, received from done. An error means
// kube-apiserver did not come back: "up" fails.
func (r *apiserverRestarter) finish(res restartResult) error {
	r.restarting = false
	if res.child != nil {
		r.current = res.child
	}
	if res.err != nil {
		msg := fmt.Sprintf("kube-apiserver did not come back after a restart: %v", res.err)
		// When it exited, the error has its last log lines already.
		if res.child != nil && !res.child.exited() {
			msg += fmt.Sprintf("; last log lines:\n%s", tail(res.child.log, 40))
		}
		return errors.New(msg)
	}
	r.logf("kube-apiserver restarted (ready after %d ms)", res.elapsed.Milliseconds())
	return nil
}

// wait waits for the restart in progress, if any (the caller has cancelled its
// context), and records the kube-apiserver it started, for "up" to stop it.
func (r *apiserverRestarter) wait() {
	if !r.restarting {
		return
	}
	res := <-r.done
	r.restarting = false
	if res.child != nil {
		r.current = res.child
	}
}

// exited is closed when the current kube-apiserver exits; nil (never ready)
// during a restart, whose stop is deliberate.
func (r *apiserverRestarter) exited() <-chan struct{} {
	if r.restarting {
		return nil
	}
	return r.current.done
}

// supervise is "up" once the control plane is ready. It returns nil on a
// signal from stop, an error when a component exits (kube-apiserver outside a
// restart, or one that does not come back from one) or etcd fails. A signal
// from restart restarts kube-apiserver (see restartSignal); one during a
// restart is ignored. On return no restart is in progress: api.current is the
// kube-apiserver to stop.
func supervise(stop, restart <-chan os.Signal, api *apiserverRestarter, others []*child, etcdErr <-chan error) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		api.wait()
	}()
	exits := make(chan *child, len(others))
	for _, c := range others {
		go func() {
			<-c.done
			exits <- c
		}()
	}
	for {
		select {
		case s := <-stop:
			api.logf("got %v, stopping", s)
			return nil
		case s := <-restart:
			if api.restarting {
				api.logf("got %v while kube-apiserver is restarting, ignored", s)
				continue
			}
			sig := restartSignal(s)
			api.logf("got %v: restarting kube-apiserver (%v)", s, sig)
			api.begin(ctx, sig)
		case res := <-api.done:
			if err := api.finish(res); err != nil {
				return err
			}
		case <-api.exited():
			c := api.current
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", c.name, c.err, tail(c.log, 40))
		case c := <-exits:
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", c.name, c.err, tail(c.log, 40))
		case err := <-etcdErr:
			return fmt.Errorf("etcd: %w", err)
		}
	}
}
