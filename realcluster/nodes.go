package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Fake Nodes: the shared contract of wasm-operator's issue 25. kwok manages
// the Nodes carrying fakeNodeAnnotation (its --manage-nodes-with-annotation-selector)
// and runs the Pods the scheduler binds to them.
const (
	fakeNodeCount           = 3
	fakeNodePrefix          = "kwok-node-"
	fakeNodeAnnotationKey   = "kwok.x-k8s.io/node"
	fakeNodeAnnotationValue = "fake"
)

// fakeNodeNames are the Nodes "up" creates: kwok-node-0, kwok-node-1, ...
func fakeNodeNames() []string {
	names := make([]string, fakeNodeCount)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", fakeNodePrefix, i)
	}
	return names
}

// fakeNodeJSON is the manifest of one fake Node: no taints (so every Pod may
// land on it), generous allocatable (32 cpu, 256Gi memory, 110 pods), the
// labels a kubelet sets and the contract's `type: kwok`. kwok's node-initialize
// stage keeps the allocatable and capacity given here and adds the conditions.
func fakeNodeJSON(name string) ([]byte, error) {
	resources := map[string]string{"cpu": "32", "memory": "256Gi", "pods": "110"}
	node := map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata": map[string]any{
			"name": name,
			"annotations": map[string]string{
				fakeNodeAnnotationKey:          fakeNodeAnnotationValue,
				"node.alpha.kubernetes.io/ttl": "0",
			},
			"labels": map[string]string{
				"type":                   "kwok",
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"kubernetes.io/role":     "agent",
			},
		},
		"spec": map[string]any{},
		"status": map[string]any{
			"allocatable": resources,
			"capacity":    resources,
		},
	}
	return json.Marshal(node)
}

// nodeList is the part of a NodeList that readiness needs.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"items"`
}

// nodesNotReady reads a NodeList (JSON) and returns, sorted, those of want that
// are missing or whose Ready condition is not True. Empty means all are Ready.
func nodesNotReady(nodeListJSON []byte, want []string) ([]string, error) {
	var list nodeList
	if err := json.Unmarshal(nodeListJSON, &list); err != nil {
		return nil, fmt.Errorf("decode NodeList: %w", err)
	}
	ready := map[string]bool{}
	for _, item := range list.Items {
		for _, c := range item.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready[item.Metadata.Name] = true
			}
		}
	}
	var notReady []string
	for _, name := range want {
		if !ready[name] {
			notReady = append(notReady, name)
		}
	}
	sort.Strings(notReady)
	return notReady, nil
}

// describeNodes is nodesNotReady's answer for a log line or an error.
func describeNodes(notReady []string) string {
	if len(notReady) == 0 {
		return "all Ready"
	}
	return "not Ready: " + strings.Join(notReady, ", ")
}
