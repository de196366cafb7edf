package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestMain lets the test binary stand in for the realcluster binary: "up"
// re-executes os.Executable() for its components, which here is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "up", "apiserver", "kube-apiserver", "controller-manager", "kube-controller-manager", "scheduler", "kube-scheduler", "kwok", "reap", "version":
			os.Exit(run(os.Args[1:]))
		}
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for the exec goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type cluster struct {
	t          *testing.T
	cmd        *exec.Cmd
	stderr     *syncBuffer
	done       chan struct{}
	stateDir   string // the --dir: must be empty after stop
	logDir     string
	kubeconfig string
	config     *rest.Config
}

// startCluster runs "up" as a child process and waits for its kubeconfig.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &cluster{
		t:          t,
		stderr:     &syncBuffer{},
		done:       make(chan struct{}),
		stateDir:   filepath.Join(dir, "state"),
		logDir:     filepath.Join(dir, "logs"),
		kubeconfig: filepath.Join(dir, "kubeconfig"),
	}
	c.cmd = exec.Command(self, "up", "--dir", c.stateDir, "--kubeconfig", c.kubeconfig, "--log-dir", c.logDir, "--quiet")
	c.cmd.Stdout = c.stderr
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	start := time.Now()
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		if !c.exited() {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				_ = c.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			c.dumpLogs()
		}
	})
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if _, err := os.Stat(c.kubeconfig); err == nil {
			break
		}
		if c.exited() {
			t.Fatalf("realcluster up exited before ready: %v\n%s", c.cmd.ProcessState, c.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("realcluster up not ready after 4m\n%s", c.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("control plane ready in %.1fs", time.Since(start).Seconds())
	if c.config, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *cluster) dumpLogs() {
	c.t.Logf("realcluster up output:\n%s", c.stderr.String())
	for _, f := range []string{"kube-apiserver.log", "kube-controller-manager.log", "etcd.log"} {
		c.t.Logf("last lines of %s:\n%s", f, tail(filepath.Join(c.logDir, f), 30))
	}
}

// checkGone asserts nothing of the control plane is left: the state directory's
// parent is empty and the kubeconfig is removed.
func (c *cluster) checkGone(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		entries, err := os.ReadDir(c.stateDir)
		_, kerr := os.Stat(c.kubeconfig)
		if err == nil && len(entries) == 0 && os.IsNotExist(kerr) {
			return
		}
		if time.Now().After(deadline) {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			c.t.Fatalf("left behind: state entries %v (err %v), kubeconfig stat err %v", names, err, kerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func TestUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c := startCluster(t)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(c.config)

	// kubectl, if installed, talks to it with the written kubeconfig.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", c.kubeconfig, "get", "namespace", "kube-system", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "namespace/kube-system" {
			t.Fatalf("kubectl get namespace: %v: %s", err, out)
		}
	}

	// Namespace.
	ns := "smoke"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Garbage collector: a ConfigMap owned by another goes when its owner is deleted.
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bg := metav1.DeletePropagationBackground
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	gcStart := time.Now()
	waitFor(t, "the garbage collector to delete the dependent ConfigMap", 90*time.Second, func() (bool, error) {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	t.Logf("garbage collector deleted the dependent in %.1fs", time.Since(gcStart).Seconds())

	// Job controller: a Job gets its Pod, kube-scheduler binds it to a fake
	// Node, kwok runs it to completion and the Job controller marks the Job
	// Complete. Creating the Pod also needs the "default" ServiceAccount
	// (serviceaccount controller).
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "c", Image: "busybox"}},
		}}},
	}
	if _, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Job controller to create a Pod", 90*time.Second, func() (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=job"})
		return err == nil && len(pods.Items) == 1, err
	})
	waitFor(t, "the Job to complete on a fake Node", 90*time.Second, func() (bool, error) {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				return j.Status.Succeeded == 1, nil
			}
		}
		return false, nil
	})
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != fakeNodeCount {
		t.Fatalf("%d Nodes labelled type=kwok, want %d", len(nodes.Items), fakeNodeCount)
	}
	for _, n := range nodes.Items {
		if len(n.Spec.Taints) != 0 {
			t.Errorf("Node %s has taints %v: Pods without tolerations would not land on it", n.Name, n.Spec.Taints)
		}
	}

	// A CRD is installed, established and served.
	ax := apiextensionsclient.NewForConfigOrDie(c.config)
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.smoke.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "smoke.example.com",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer"}}},
					},
				}},
			}},
		},
	}
	if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the CRD to be established", 60*time.Second, func() (bool, error) {
		got, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %v", got.Status.Conditions)
	})
	dyn := dynamic.NewForConfigOrDie(c.config)
	gvr := schema.GroupVersionResource{Group: "smoke.example.com", Version: "v1", Resource: "widgets"}
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "smoke.example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
		"spec":     map[string]any{"size": int64(3), "dropped": "pruned by the structural schema"},
	}}
	waitFor(t, "a Widget to be created", 30*time.Second, func() (bool, error) {
		_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
		return err == nil, err
	})
	got, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Fatalf("widget spec.size = %d, want 3: %v", size, got.Object)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "dropped"); found {
		t.Fatalf("unknown field not pruned: %v", got.Object)
	}

	// Namespace controller: deleting the namespace removes it and its contents.
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace controller to delete the namespace", 120*time.Second, func() (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})

	// Stop: SIGTERM, a clean exit, nothing left behind.
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatal("realcluster up did not stop within 60s of SIGTERM")
	}
	if !c.cmd.ProcessState.Success() {
		t.Fatalf("realcluster up exited with %v\n%s", c.cmd.ProcessState, c.stderr.String())
	}
	c.checkGone(time.Second)
}

// TestUpKilled: when "up" is SIGKILLed, its components die with it
// (PR_SET_PDEATHSIG) and the reaper removes the state and the kubeconfig.
func TestUpKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane")
	}
	c := startCluster(t)
	cs := kubernetes.NewForConfigOrDie(c.config)
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.done
	c.checkGone(20 * time.Second)
	// The components are gone: the apiserver no longer answers.
	waitFor(t, "the kube-apiserver to stop", 20*time.Second, func() (bool, error) {
		_, err := cs.Discovery().ServerVersion()
		return err != nil, nil
	})
}

// The kube-apiserver restart on SIGUSR1/SIGUSR2 (restart.go), with shells
// standing in for the components: supervise as "up" runs it once ready.

// logLines collects apiserverRestarter.logf's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) find(prefix string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// fakeAPIServer starts "/bin/sh -c script" as kube-apiserver, logging to logPath.
func fakeAPIServer(t *testing.T, logPath, script string) (*child, error) {
	c, err := startProcess("kube-apiserver", logPath, syscall.SIGKILL, "/bin/sh", "-c", script)
	if err == nil {
		t.Cleanup(func() { c.stopWith(syscall.SIGKILL, time.Second) })
	}
	return c, err
}

type superviseRun struct {
	stop, restart chan os.Signal
	result        chan error
	logs          *logLines
}

func startSupervise(api *apiserverRestarter, others ...*child) *superviseRun {
	r := &superviseRun{stop: make(chan os.Signal, 1), restart: make(chan os.Signal, 1), result: make(chan error, 1), logs: &logLines{}}
	api.logf = r.logs.logf
	go func() { r.result <- supervise(r.stop, r.restart, api, others, nil) }()
	return r
}

func (r *superviseRun) waitLog(t *testing.T, prefix string) string {
	t.Helper()
	var line string
	waitFor(t, fmt.Sprintf("a log line %q", prefix), 15*time.Second, func() (bool, error) {
		line = r.logs.find(prefix)
		return line != "", fmt.Errorf("log so far:\n%s", r.logs)
	})
	return line
}

func (r *superviseRun) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.result:
		t.Fatalf("supervise returned %v\n%s", err, r.logs)
	default:
	}
}

func (r *superviseRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.result:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("supervise did not return\n%s", r.logs)
		return nil
	}
}

func TestSuperviseRestartsAPIServer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sig     os.Signal
		script  string
		stopped string // how the old one ended
	}{
		{"SIGUSR1 stops it with SIGTERM", syscall.SIGUSR1, `echo started; exec sleep 60`, "signal: terminated"},
		{"SIGUSR2 stops it with SIGKILL", syscall.SIGUSR2, `echo started; exec sleep 60`, "signal: killed"},
		{"SIGUSR1 kills it after the grace period", syscall.SIGUSR1, `trap "" TERM; echo started; exec sleep 60`, "signal: killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "kube-apiserver.log")
			old, err := fakeAPIServer(t, logPath, tc.script)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the fake kube-apiserver to start", 10*time.Second, func() (bool, error) {
				b, err := os.ReadFile(logPath)
				return bytes.Contains(b, []byte("started")), err
			})
			kcm, err := startProcess("kube-controller-manager", "", syscall.SIGKILL, "/bin/sleep", "60")
			if err != nil {
				t.Fatal(err)
			}
			defer kcm.stopWith(syscall.SIGKILL, time.Second)

			var starts atomic.Int32
			readyCalled := make(chan *child, 1)
			gate := make(chan struct{})
			api := newAPIServerRestarter(old, func() (*child, error) {
				starts.Add(1)
				return fakeAPIServer(t, logPath, tc.script)
			}, func(ctx context.Context, c *child) error {
				readyCalled <- c
				select {
				case <-gate:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}, 10*time.Second)
			api.grace = 300 * time.Millisecond
			r := startSupervise(api, kcm)

			r.restart <- tc.sig
			var restarted *child
			select {
			case restarted = <-readyCalled:
			case <-time.After(15 * time.Second):
				t.Fatalf("no kube-apiserver started again\n%s", r.logs)
			}
			// The deliberate stop is no failure; a second signal is ignored.
			if !old.exited() || old.err == nil || old.err.Error() != tc.stopped {
				t.Fatalf("old kube-apiserver: exited %v, %v; want %s", old.exited(), old.err, tc.stopped)
			}
			r.restart <- syscall.SIGUSR2
			r.waitLog(t, "got user defined signal 2 while kube-apiserver is restarting, ignored")
			r.running(t)
			close(gate)
			line := r.waitLog(t, "kube-apiserver restarted (ready after ")
			t.Log(line)
			r.running(t)
			if n := starts.Load(); n != 1 {
				t.Fatalf("%d starts, want 1", n)
			}
			if got, want := strings.Join(restarted.cmd.Args, " "), strings.Join(old.cmd.Args, " "); got != want {
				t.Fatalf("restarted with %q, want %q", got, want)
			}
			b, _ := os.ReadFile(logPath)
			if n := strings.Count(string(b), "started"); n != 2 {
				t.Fatalf("log file has %d starts, want 2 (appended): %q", n, b)
			}
			if kcm.exited() {
				t.Fatal("the other component was stopped")
			}

			// Now the new one is supervised: its exit ends "up".
			_ = restarted.cmd.Process.Kill()
			err = r.wait(t)
			if err == nil || !strings.HasPrefix(err.Error(), "kube-apiserver exited (signal: killed)") {
				t.Fatalf("supervise returned %v, want kube-apiserver exited", err)
			}
		})
	}
}

func TestSuperviseAPIServerNotBack(t *testing.T) {
	port, err := freePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Second}
	ready := func(ctx context.Context, c *child) error {
		return poll(ctx, client, fmt.Sprintf("https://127.0.0.1:%d/readyz", port), "token", c)
	}
	for _, tc := range []struct {
		name, script string
		want         []string
	}{
		{"exits", `echo "Error: unknown flag: --bogus"; exit 1`,
			[]string{"kube-apiserver did not come back after a restart: kube-apiserver exited (exit status 1) before it was ready", "unknown flag: --bogus"}},
		{"not ready in time", `echo "still starting"; exec sleep 60`,
			[]string{"kube-apiserver did not come back after a restart: https://127.0.0.1:", "/readyz not ready", "last log lines:\nstarted\nstill starting"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "kube-apiserver.log")
			old, err := fakeAPIServer(t, logPath, `echo started; exec sleep 60`)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the fake kube-apiserver to start", 10*time.Second, func() (bool, error) {
				b, err := os.ReadFile(logPath)
				return bytes.Contains(b, []byte("started")), err
			})
			api := newAPIServerRestarter(old, func() (*child, error) {
				return fakeAPIServer(t, logPath, tc.script)
			}, ready, 1500*time.Millisecond)
			r := startSupervise(api)
			r.restart <- syscall.SIGUSR1
			err = r.wait(t)
			if err == nil {
				t.Fatal("supervise returned nil")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A stop signal during a restart stops "up": the restart is abandoned, and
// the kube-apiserver it started is the one "up" then stops.
func TestSuperviseStopDuringRestart(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "kube-apiserver.log")
	old, err := fakeAPIServer(t, logPath, `exec sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	readyCalled := make(chan *child, 1)
	api := newAPIServerRestarter(old, func() (*child, error) {
		return fakeAPIServer(t, logPath, `exec sleep 60`)
	}, func(ctx context.Context, c *child) error {
		readyCalled <- c
		<-ctx.Done()
		return ctx.Err()
	}, time.Minute)
	r := startSupervise(api)
	r.restart <- syscall.SIGUSR2
	restarted := <-readyCalled
	r.stop <- syscall.SIGTERM
	if err := r.wait(t); err != nil {
		t.Fatalf("supervise returned %v, want nil", err)
	}
	if api.current != restarted || api.restarting {
		t.Fatalf("current kube-apiserver %p (restarting %v), want the restarted one %p", api.current, api.restarting, restarted)
	}
	if restarted.exited() {
		t.Fatal("supervise stopped the kube-apiserver itself")
	}
}
