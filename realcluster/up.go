package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// defaultControllers are the kube-controller-manager controllers "up" enables:
// what a test of an operator observes. Pods are scheduled by kube-scheduler and
// run by kwok on fake Nodes (workloads.go); no node lifecycle controller, so a
// late kwok heartbeat never taints a Node or evicts its Pods.
var defaultControllers = []string{
	"garbage-collector-controller",
	"namespace-controller",
	"job-controller",
	"cronjob-controller",
	"ttl-after-finished-controller",
	"deployment-controller",
	"replicaset-controller",
	"statefulset-controller",
	"daemonset-controller",
	"serviceaccount-controller",       // the "default" ServiceAccount, required to create Pods
	"serviceaccount-token-controller", // legacy token Secrets
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller", // fills the admin/edit/view ClusterRoles
	"resourcequota-controller",
}

const upUsage = `usage: realcluster up [flags]

Runs etcd (embedded), kube-apiserver, kube-controller-manager, kube-scheduler
and kwok on 127.0.0.1, writes the kubeconfig once they are ready (and prints it
unless --quiet), and runs until a signal or until a component exits (then it
exits 1 with the component's last log lines). See realcluster/README.md.

Signals:
  SIGINT, SIGTERM, SIGHUP  stop everything, remove the state directory and the kubeconfig
  SIGUSR1                  restart kube-apiserver as an upgrade would: SIGTERM it (SIGKILL
                           after 20s), start it again with the same flags, port, certificates,
                           etcd and log file (appended), wait for its /readyz, then log
                           "kube-apiserver restarted (ready after N ms)"; the other components
                           keep running. Ignored (logged) during a restart and before ready.
                           A kube-apiserver not ready again within --timeout ends "up" (exit 1).
  SIGUSR2                  the same with SIGKILL instead of SIGTERM (a crash)

Flags:
`

type upOptions struct {
	dir           string
	kubeconfig    string
	port          int
	logDir        string
	controllers   string
	timeout       time.Duration
	exitOnParent  bool
	quiet         bool
	extraAPIFlags multiFlag
	extraCMFlags  multiFlag

	extraSchedulerFlags multiFlag
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func upMain(args []string) int {
	var o upOptions
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.StringVar(&o.dir, "dir", os.TempDir(), "parent directory of the control plane's state directory (etcd data, certificates, keys, logs); the state directory is created inside it and removed on exit")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "where to write the admin kubeconfig once the control plane is ready (written atomically; removed on exit). Default: DIR/<state>/kubeconfig")
	fs.IntVar(&o.port, "port", 0, "kube-apiserver secure port on 127.0.0.1 (0: a free port)")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok logs in this directory (default: in the state directory, removed on exit)")
	fs.StringVar(&o.controllers, "controllers", strings.Join(defaultControllers, ","), "kube-controller-manager --controllers")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the control plane to become ready")
	fs.BoolVar(&o.exitOnParent, "exit-with-parent", false, "stop (and clean up) when the process that started realcluster exits (Linux PR_SET_PDEATHSIG; note it fires when the *thread* that spawned us exits)")
	fs.BoolVar(&o.quiet, "quiet", false, "do not print the kubeconfig on stdout when ready")
	fs.Var(&o.extraAPIFlags, "apiserver-flag", "extra kube-apiserver flag, e.g. --apiserver-flag=--v=2 (repeatable)")
	fs.Var(&o.extraCMFlags, "controller-manager-flag", "extra kube-controller-manager flag (repeatable)")
	fs.Var(&o.extraSchedulerFlags, "scheduler-flag", "extra kube-scheduler flag (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), upUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "realcluster up: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := up(o); err != nil {
		logf("error: %v", err)
		return 1
	}
	return 0
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "realcluster: "+format+"\n", args...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is one spawned process of this binary.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// startChild re-executes this binary with args; its output goes to logPath
// (appended: a restarted component keeps its earlier log), or nowhere if "".
func startChild(name, logPath string, pdeathsig syscall.Signal, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startProcess(name, logPath, pdeathsig, self, args...)
}

// startProcess runs the program at path as a child of "up" (see startChild).
func startProcess(name, logPath string, pdeathsig syscall.Signal, path string, args ...string) (*child, error) {
	var out io.Writer = io.Discard
	var f *os.File
	if logPath != "" {
		var err error
		if f, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		out = f
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Dies with us, even when we are SIGKILLed.
		Pdeathsig: pdeathsig,
		// Own process group: a Ctrl-C in a terminal reaches only the orchestrator,
		// which then stops the components in order.
		Setpgid: true,
	}
	if err := cmd.Start(); err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		if f != nil {
			f.Close()
		}
		close(c.done)
	}()
	return c, nil
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs.
func (c *child) stop(grace time.Duration) {
	c.stopWith(syscall.SIGTERM, grace)
}

// stopWith sends sig, waits up to grace for the process to exit, then SIGKILLs.
func (c *child) stopWith(sig syscall.Signal, grace time.Duration) {
	if c == nil || c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

func kubeconfigYAML(server string, caPEM []byte, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: realcluster
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: realcluster
  context:
    cluster: realcluster
    user: admin
    namespace: default
current-context: realcluster
`, server, base64.StdEncoding.EncodeToString(caPEM), token)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// poll GETs url with the bearer token until it answers 200, ctx ends or a child exits.
func poll(ctx context.Context, client *http.Client, u, token string, children ...*child) error {
	var last string
	for {
		for _, c := range children {
			if c.exited() {
				return fmt.Errorf("%s exited (%v) before it was ready; last log lines:\n%s", c.name, c.err, tail(c.log, 40))
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %s", u, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func up(o upOptions) (retErr error) {
	start := time.Now()
	if o.exitOnParent {
		// PR_SET_PDEATHSIG for ourselves; then check the parent did not die already.
		ppid := os.Getppid()
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
			return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %v", errno)
		}
		if os.Getppid() != ppid {
			return errors.New("parent exited")
		}
	}
	// Signals first, so that a SIGTERM during startup still cleans up.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// SIGUSR1/SIGUSR2 restart kube-apiserver once ready (restart.go); caught
	// from the start, as their default action would kill "up".
	restartSigs := make(chan os.Signal, 2)
	signal.Notify(restartSigs, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(restartSigs)

	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	state, err := os.MkdirTemp(o.dir, "realcluster-")
	if err != nil {
		return err
	}
	state, _ = filepath.Abs(state)
	kubeconfigPath := o.kubeconfig
	if kubeconfigPath == "" {
		kubeconfigPath = filepath.Join(state, "kubeconfig")
	}
	kubeconfigPath, _ = filepath.Abs(kubeconfigPath)
	logDir := state
	if o.logDir != "" {
		if logDir, err = filepath.Abs(o.logDir); err != nil {
			return err
		}
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return err
		}
	}

	// Everything started is stopped, in reverse order, and the state removed.
	var (
		etcd            *embed.Etcd
		apiserver, kcm  *child
		scheduler, kwok *child
		reaper          *child
		wroteKubeconfig bool
	)
	defer func() {
		kwok.stop(5 * time.Second)
		scheduler.stop(5 * time.Second)
		kcm.stop(10 * time.Second)
		apiserver.stop(15 * time.Second)
		if etcd != nil {
			etcd.Close()
		}
		if wroteKubeconfig {
			_ = os.Remove(kubeconfigPath)
		}
		if err := os.RemoveAll(state); err != nil && retErr == nil {
			retErr = err
		}
		if reaper != nil && !reaper.exited() {
			_ = reaper.cmd.Process.Kill() // its job is done
			<-reaper.done
		}
		logf("stopped; removed %s", state)
	}()

	// A reaper child removes the state (and kubeconfig) should we be SIGKILLed:
	// it gets SIGTERM through PR_SET_PDEATHSIG when we die.
	reapArgs := []string{"reap", strconv.Itoa(os.Getpid()), state}
	if o.kubeconfig != "" {
		reapArgs = append(reapArgs, kubeconfigPath)
	}
	if reaper, err = startChild("reaper", "", syscall.SIGTERM, reapArgs...); err != nil {
		return err
	}

	p, err := generatePKI(state)
	if err != nil {
		return fmt.Errorf("generate certificates: %w", err)
	}

	// etcd, embedded in this process.
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "realcluster"
	cfg.Dir = filepath.Join(state, "etcd")
	cu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = true // throw-away test data
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(logDir, "etcd.log")}
	if etcd, err = embed.StartEtcd(cfg); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	select {
	case <-etcd.Server.ReadyNotify():
	case err := <-etcd.Err():
		return fmt.Errorf("etcd: %w", err)
	case <-time.After(60 * time.Second):
		return errors.New("etcd did not become ready in 60s")
	case s := <-sigs:
		return fmt.Errorf("interrupted by %v", s)
	}

	// kube-apiserver.
	port := o.port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", port)
	apiArgs := []string{"apiserver",
		"--etcd-servers=" + cu.String(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(state, "apiserver-certs"),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		"--token-auth-file=" + p.TokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.0.0.0/24",
		// Endpoints may not hold loopback addresses: the "kubernetes" Service gets none.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		// On SIGTERM, end the open watches (the other components hold some) and
		// exit in about a second. Upstream's default (0) leaves them open, and
		// net/http's graceful shutdown then waits for the 60 s request timeout:
		// a SIGUSR1 restart would end in a SIGKILL. Overridable (the last
		// occurrence of a flag wins).
		"--shutdown-watch-termination-grace-period=10s",
	}
	apiArgs = append(apiArgs, o.extraAPIFlags...)
	// A restart (SIGUSR1/SIGUSR2) starts it again the same way, appending to its log.
	startAPIServer := func() (*child, error) {
		return startChild("kube-apiserver", filepath.Join(logDir, "kube-apiserver.log"), syscall.SIGKILL, apiArgs...)
	}
	if apiserver, err = startAPIServer(); err != nil {
		return err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CAPEM)
	httpClient := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil},
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var interrupted atomic.Bool
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		for {
			select {
			case s := <-sigs:
				logf("got %v during startup, stopping", s)
				interrupted.Store(true)
				cancel()
				return
			case s := <-restartSigs:
				logf("got %v during startup, ignored (kube-apiserver restarts only once ready)", s)
			case <-ctx.Done():
				return
			}
		}
	}()

	// The controller manager's kubeconfig (same admin token).
	kcmKubeconfig := filepath.Join(state, "controller-manager.kubeconfig")
	if err := os.WriteFile(kcmKubeconfig, []byte(kubeconfigYAML(server, p.CAPEM, p.Token)), 0o600); err != nil {
		return err
	}
	if err := poll(ctx, httpClient, server+"/readyz", p.Token, apiserver); err != nil {
		if interrupted.Load() {
			return nil
		}
		return err
	}
	logf("kube-apiserver ready at %s (%.1fs)", server, time.Since(start).Seconds())

	// kube-controller-manager.
	kcmPort, err := freePort()
	if err != nil {
		return err
	}
	kcmArgs := []string{"controller-manager",
		"--kubeconfig=" + kcmKubeconfig,
		"--authentication-kubeconfig=" + kcmKubeconfig,
		"--authorization-kubeconfig=" + kcmKubeconfig,
		// Authenticate its clients by TokenReview only: the apiserver has no
		// request-header (front proxy) CA for it to look up.
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--controllers=" + o.controllers,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CACert,
		"--profiling=false",
	}
	kcmArgs = append(kcmArgs, o.extraCMFlags...)
	if kcm, err = startChild("kube-controller-manager", filepath.Join(logDir, "kube-controller-manager.log"), syscall.SIGKILL, kcmArgs...); err != nil {
		return err
	}
	if err := poll(ctx, httpClient, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), p.Token, kcm, apiserver); err != nil {
		if interrupted.Load() {
			return nil
		}
		return err
	}
	logf("kube-controller-manager healthy (%.1fs)", time.Since(start).Seconds())

	// kube-scheduler, kwok and the fake Nodes.
	env := componentEnv{start: start, server: server, kubeconfig: kcmKubeconfig, state: state,
		logDir: logDir, pki: p, client: httpClient, apiserver: apiserver}
	if scheduler, kwok, err = startWorkloadComponents(ctx, o, env); err != nil {
		if interrupted.Load() {
			return nil
		}
		return err
	}

	// Ready: the kubeconfig appears (atomically) only now.
	kc := kubeconfigYAML(server, p.CAPEM, p.Token)
	if err := os.MkdirAll(filepath.Dir(kubeconfigPath), 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(kubeconfigPath, []byte(kc), 0o600); err != nil {
		return err
	}
	wroteKubeconfig = o.kubeconfig != ""
	logf("ready in %.1fs: kubeconfig %s, state %s", time.Since(start).Seconds(), kubeconfigPath, state)
	if !o.quiet {
		fmt.Print(kc)
		os.Stdout.Sync()
	}

	// Run until a signal, or until a component dies.
	cancel()
	<-watcherDone
	if interrupted.Load() { // the startup signal watcher took it
		return nil
	}
	// SIGUSR1/SIGUSR2 restart kube-apiserver (restart.go).
	ready := func(ctx context.Context, c *child) error {
		return poll(ctx, httpClient, server+"/readyz", p.Token, c)
	}
	api := newAPIServerRestarter(apiserver, startAPIServer, ready, o.timeout)
	err = supervise(sigs, restartSigs, api, []*child{kcm, scheduler, kwok}, etcd.Err())
	apiserver = api.current // the one to stop, if restarted
	return err
}

// reapMain: "reap PID PATH...". Started by "up" with PR_SET_PDEATHSIG=SIGTERM;
// when its parent dies without cleaning up (e.g. SIGKILL), it waits for its
// siblings to go (they get SIGKILL the same way) and removes PATHs. "up" kills
// it with SIGKILL after a normal shutdown.
func reapMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: realcluster reap PID PATH...")
		return 2
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	if os.Getppid() != parent { // parent died before PR_SET_PDEATHSIG was in place
		sigs <- syscall.SIGTERM
	}
	<-sigs
	time.Sleep(500 * time.Millisecond) // let the SIGKILLed siblings exit
	for _, p := range args[1:] {
		_ = os.RemoveAll(p)
	}
	return 0
}
