package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
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
	for _, name := range []string{"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete", "pod-fail", "pvc-provision", "pvc-delete", "pv-bind", "pv-delete"} {
		if !strings.Contains(text, "\n  name: "+name+"\n") {
			t.Errorf("stage %s missing from the embedded stages", name)
		}
	}
	if !strings.Contains(text, `simulate.wasm-operator.dev/outcome`) {
		t.Error("the failure stage does not select on the contract's label")
	}
}
