package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	kwokconfig "sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/utils/gotpl"
	"sigs.k8s.io/kwok/pkg/utils/lifecycle"
)

func TestFakeNodeNamesFollowTheContract(t *testing.T) {
	want := []string{"kwok-node-0", "kwok-node-1", "kwok-node-2"}
	if got := fakeNodeNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("fakeNodeNames() = %v, want %v", got, want)
	}
}

func TestFakeNodeIsManagedByKwokAndRoomy(t *testing.T) {
	data, err := fakeNodeJSON("kwok-node-0")
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
			Labels      map[string]string `json:"labels"`
		} `json:"metadata"`
		Status struct {
			Allocatable map[string]string `json:"allocatable"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &node); err != nil {
		t.Fatal(err)
	}
	if got := node.Metadata.Annotations["kwok.x-k8s.io/node"]; got != "fake" {
		t.Errorf("annotation kwok.x-k8s.io/node = %q, want fake", got)
	}
	if got := node.Metadata.Labels["type"]; got != "kwok" {
		t.Errorf("label type = %q, want kwok", got)
	}
	want := map[string]string{"cpu": "32", "memory": "256Gi", "pods": "110"}
	if !reflect.DeepEqual(node.Status.Allocatable, want) {
		t.Errorf("allocatable = %v, want %v", node.Status.Allocatable, want)
	}
}

func TestNodesNotReadyNamesMissingAndUnreadyNodes(t *testing.T) {
	list := `{"items":[
	  {"metadata":{"name":"kwok-node-0"},"status":{"conditions":[{"type":"Ready","status":"True"}]}},
	  {"metadata":{"name":"kwok-node-1"},"status":{"conditions":[{"type":"Ready","status":"False"}]}},
	  {"metadata":{"name":"other"},"status":{}}]}`
	got, err := nodesNotReady([]byte(list), fakeNodeNames())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"kwok-node-1", "kwok-node-2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("nodesNotReady = %v, want %v", got, want)
	}
	if got := describeNodes(got); got != "not Ready: kwok-node-1, kwok-node-2" {
		t.Errorf("describeNodes = %q", got)
	}
	if _, err := nodesNotReady([]byte("not json"), fakeNodeNames()); err == nil {
		t.Error("nodesNotReady accepted a body that is not JSON")
	}
}

func TestStagesHoldKwoksDefaultsAndTheFailureStage(t *testing.T) {
	data, err := stagesYAML()
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete", "pod-fail", "pod-hang", "pod-complete-backup", "pvc-provision", "pvc-delete", "pv-bind", "pv-delete"} {
		if !strings.Contains(text, "\n  name: "+name+"\n") {
			t.Errorf("stage %s missing from the embedded stages", name)
		}
	}
	if !strings.Contains(text, `simulate.wasm-operator.dev/outcome`) {
		t.Error("the failure stage does not select on the contract's label")
	}
}

// podLifecycle loads the embedded stages as kwok's --config does and keeps
// the Pod stages, as kwok's Pod controller does.
func podLifecycle(t *testing.T) lifecycle.Lifecycle {
	t.Helper()
	data, err := stagesYAML()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "stages.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := kwokconfig.Load(context.Background(), path)
	if err != nil {
		t.Fatalf("kwok does not load the embedded stages: %v", err)
	}
	var pods []*internalversion.Stage
	for _, s := range kwokconfig.FilterWithType[*internalversion.Stage](objs) {
		if s.Spec.ResourceRef.Kind == "Pod" {
			pods = append(pods, s)
		}
	}
	lc, err := lifecycle.NewLifecycle(pods)
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

// candidates are the stages kwok may pick for pod: when some matching stages
// have a positive weight, only those.
func candidates(t *testing.T, lc lifecycle.Lifecycle, pod *corev1.Pod) []*lifecycle.Stage {
	t.Helper()
	stages, err := lc.ListAllPossible(context.Background(), &lifecycle.Event{Labels: pod.Labels, Annotations: pod.Annotations, Data: pod})
	if err != nil {
		t.Fatal(err)
	}
	return stages
}

func stageNames(stages []*lifecycle.Stage) []string {
	var out []string
	for _, s := range stages {
		out = append(out, s.Name())
	}
	return out
}

func jobPod(phase corev1.PodPhase, labels map[string]string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "default", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "j", UID: "u"}},
		},
		Spec:   corev1.PodSpec{NodeName: "kwok-node-0", RestartPolicy: corev1.RestartPolicyNever, Containers: containers},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func TestStagesForHangAndBackupAreAcceptedAndWinByWeight(t *testing.T) {
	lc := podLifecycle(t)
	main := corev1.Container{Name: "main", Image: "pause"}
	hang := map[string]string{"simulate.wasm-operator.dev/outcome": "hang"}
	if got := stageNames(candidates(t, lc, jobPod(corev1.PodPending, hang, main))); !reflect.DeepEqual(got, []string{"pod-ready"}) {
		t.Errorf("a Pending Pod told to hang: candidates %v, want pod-ready", got)
	}
	if got := stageNames(candidates(t, lc, jobPod(corev1.PodRunning, hang, main))); !reflect.DeepEqual(got, []string{"pod-hang"}) {
		t.Errorf("a Running Job Pod told to hang: candidates %v, want pod-hang only", got)
	}
	if got := stageNames(candidates(t, lc, jobPod(corev1.PodRunning, nil, main))); !reflect.DeepEqual(got, []string{"pod-complete"}) {
		t.Errorf("a Running Job Pod: candidates %v, want pod-complete", got)
	}
	backup := map[string]string{"backup.wasm-operator.dev/name": "kv-1"}
	hangingBackup := map[string]string{"backup.wasm-operator.dev/name": "kv-1", "simulate.wasm-operator.dev/outcome": "hang"}
	if got := stageNames(candidates(t, lc, jobPod(corev1.PodRunning, hangingBackup, main))); !reflect.DeepEqual(got, []string{"pod-hang"}) {
		t.Errorf("a Running backup Pod told to hang: candidates %v, want pod-hang only", got)
	}

	tool := corev1.Container{Name: "dump", Image: "pause", Env: []corev1.EnvVar{
		{Name: "WASM_OPERATOR_BACKUP_NAME", Value: "kv-1"},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "WASM_OPERATOR_BACKUP_DESTINATION", Value: "s3://bucket/path/"},
	}}
	pod := jobPod(corev1.PodRunning, backup, tool, main)
	stages := candidates(t, lc, pod)
	if got := stageNames(stages); !reflect.DeepEqual(got, []string{"pod-complete-backup"}) {
		t.Fatalf("a Running backup Pod: candidates %v, want pod-complete-backup only", got)
	}
	// What kwok patches the Pod's status with.
	var patch []byte
	_, err := stages[0].DoSteps(0, nil, pod, gotpl.NewRenderer(nil),
		func(*internalversion.StageEvent) error { return nil },
		func() error { return nil },
		func(p *lifecycle.Patch) error { patch = p.Data; return nil },
		func(*lifecycle.Apply) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status corev1.PodStatus `json:"status"`
	}
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	if got.Status.Phase != corev1.PodSucceeded || len(got.Status.ContainerStatuses) != 2 {
		t.Fatalf("patch %s: want phase Succeeded and two containers", patch)
	}
	for i, want := range []string{`{"location":"s3://bucket/path/kv-1"}`, ""} {
		term := got.Status.ContainerStatuses[i].State.Terminated
		if term == nil || term.ExitCode != 0 || term.Reason != "Completed" || term.Message != want {
			t.Errorf("container %d: terminated %+v, want exit code 0, Completed, message %q", i, term, want)
		}
	}
}
