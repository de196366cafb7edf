package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The components that make workloads run: kube-scheduler binds Pods to the
// fake Nodes, kwok plays the kubelet's part on them through its stages.

// schedulerArgs are the flags of "realcluster scheduler", shaped like the
// controller manager's: the admin kubeconfig, TokenReview-only authentication
// of its own clients, loopback, no leader election.
func schedulerArgs(kubeconfig string, port int, p *pki) []string {
	return []string{"scheduler",
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--leader-elect=false",
		"--profiling=false",
	}
}

// kwokArgs are the flags of "realcluster kwok": the Nodes it manages are those
// annotated kwok.x-k8s.io/node=fake (as kwokctl does), its stages come from
// stagesFile. kwok serves nothing (no --server-address): no logs, exec or
// metrics of fake Pods.
func kwokArgs(kubeconfig, stagesFile string) []string {
	return []string{"kwok",
		"--kubeconfig=" + kubeconfig,
		"--config=" + stagesFile,
		"--manage-nodes-with-annotation-selector=" + fakeNodeAnnotationKey + "=" + fakeNodeAnnotationValue,
		"--cidr=10.244.0.1/16",
		"--node-lease-duration-seconds=40",
	}
}

// startWorkloadComponents starts kube-scheduler (and waits for its /healthz)
// and kwok, creates the fake Nodes and waits until kwok reports them Ready.
// The children it started are returned even on error, for the caller to stop.
func startWorkloadComponents(ctx context.Context, o upOptions, env componentEnv) (scheduler, kwok *child, err error) {
	schedPort, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	args := append(schedulerArgs(env.kubeconfig, schedPort, env.pki), o.extraSchedulerFlags...)
	if scheduler, err = startChild("kube-scheduler", filepath.Join(env.logDir, "kube-scheduler.log"), syscall.SIGKILL, args...); err != nil {
		return nil, nil, err
	}
	if err := poll(ctx, env.client, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), env.pki.Token, scheduler, env.apiserver); err != nil {
		return scheduler, nil, err
	}
	logf("kube-scheduler healthy (%.1fs)", time.Since(env.start).Seconds())

	stages, err := stagesYAML()
	if err != nil {
		return scheduler, nil, fmt.Errorf("read the embedded kwok stages: %w", err)
	}
	stagesFile := filepath.Join(env.state, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, stages, 0o644); err != nil {
		return scheduler, nil, err
	}
	if kwok, err = startChild("kwok", filepath.Join(env.logDir, "kwok.log"), syscall.SIGKILL, kwokArgs(env.kubeconfig, stagesFile)...); err != nil {
		return scheduler, nil, err
	}
	if err := createStorageClass(ctx, env); err != nil {
		return scheduler, kwok, err
	}
	for _, name := range fakeNodeNames() {
		if err := createFakeNode(ctx, env, name); err != nil {
			return scheduler, kwok, err
		}
	}
	if err := waitFakeNodesReady(ctx, env, kwok, scheduler); err != nil {
		return scheduler, kwok, err
	}
	logf("%d fake Nodes Ready (%.1fs)", fakeNodeCount, time.Since(env.start).Seconds())
	return scheduler, kwok, nil
}

// componentEnv is what the workload components share with the rest of "up".
type componentEnv struct {
	start      time.Time
	server     string // https://127.0.0.1:PORT
	kubeconfig string // the components' kubeconfig (admin token)
	state      string
	logDir     string
	pki        *pki
	client     *http.Client
	apiserver  *child
}

// createFakeNode creates one fake Node (one that exists already is fine) and
// removes the node.kubernetes.io/not-ready taint kube-apiserver's
// TaintNodesByCondition admission puts on every new Node. In a cluster the
// node lifecycle controller lifts it once the kubelet reports Ready; "up" runs
// no node lifecycle controller (a kwok heartbeat late on a loaded machine
// would have it taint the Node and evict its Pods), so "up" lifts it itself.
func createFakeNode(ctx context.Context, env componentEnv, name string) error {
	body, err := fakeNodeJSON(name)
	if err != nil {
		return err
	}
	status, answer, err := apiRequest(ctx, env, http.MethodPost, "/api/v1/nodes", "application/json", body)
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	if status != http.StatusCreated && status != http.StatusConflict {
		return fmt.Errorf("create Node %s: HTTP %d: %s", name, status, answer)
	}
	untaint := []byte(`{"spec":{"taints":null}}`)
	status, answer, err = apiRequest(ctx, env, http.MethodPatch, "/api/v1/nodes/"+name, "application/merge-patch+json", untaint)
	if err != nil {
		return fmt.Errorf("remove the taints of Node %s: %w", name, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("remove the taints of Node %s: HTTP %d: %s", name, status, answer)
	}
	return nil
}

// kwokStorageClass is kwok's default StorageClass (kustomize/stage/volume/fast
// of kwok v0.8.0): kwok's volume stages provision and bind a PersistentVolume
// for every claim of this class, so a StatefulSet's volumeClaimTemplates do
// not keep its Pods unschedulable.
const kwokStorageClass = `{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass",
"metadata":{"name":"kwok-volume","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}},
"provisioner":"kwok.x-k8s.io/volume","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"}`

// createStorageClass creates kwokStorageClass, the cluster's default
// StorageClass; one that exists already is fine.
func createStorageClass(ctx context.Context, env componentEnv) error {
	status, answer, err := apiRequest(ctx, env, http.MethodPost, "/apis/storage.k8s.io/v1/storageclasses", "application/json", []byte(kwokStorageClass))
	if err != nil {
		return fmt.Errorf("create StorageClass kwok-volume: %w", err)
	}
	if status != http.StatusCreated && status != http.StatusConflict {
		return fmt.Errorf("create StorageClass kwok-volume: HTTP %d: %s", status, answer)
	}
	return nil
}

// apiRequest sends one request with the admin token and returns the status
// and the start of the answer.
func apiRequest(ctx context.Context, env componentEnv, method, path, contentType string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, env.server+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+env.pki.Token)
	req.Header.Set("Content-Type", contentType)
	resp, err := env.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(answer)), nil
}

// waitFakeNodesReady lists the Nodes until every fake Node's Ready condition is
// True (kwok's node-initialize stage), ctx ends or a component exits.
func waitFakeNodesReady(ctx context.Context, env componentEnv, components ...*child) error {
	last := "no answer yet"
	for {
		for _, c := range append(components, env.apiserver) {
			if c.exited() {
				return fmt.Errorf("%s exited (%v) before the fake Nodes were Ready; last log lines:\n%s", c.name, c.err, tail(c.log, 40))
			}
		}
		if notReady, err := listFakeNodesNotReady(ctx, env); err != nil {
			last = err.Error()
		} else if len(notReady) == 0 {
			return nil
		} else {
			last = describeNodes(notReady)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fake Nodes not Ready in time (%s); kwok's log: %s", last, filepath.Join(env.logDir, "kwok.log"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func listFakeNodesNotReady(ctx context.Context, env componentEnv) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.server+"/api/v1/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+env.pki.Token)
	resp, err := env.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list Nodes: HTTP %d", resp.StatusCode)
	}
	return nodesNotReady(body, fakeNodeNames())
}
