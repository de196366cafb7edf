package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
