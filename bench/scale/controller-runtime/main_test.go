package main

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStatusIsWrittenOnceThenLeftAlone(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	first := desiredStatus(WebAppStatus{}, 1, 1, 0, t0)
	if first.ReadyReplicas == nil || *first.ReadyReplicas != 0 || first.Phase != "Pending" || first.ObservedGeneration != 1 {
		t.Fatalf("first status: %+v", first)
	}
	if c := first.Conditions[0]; c.Type != "Ready" || c.Status != metav1.ConditionFalse || !c.LastTransitionTime.Equal(&t0) || c.ObservedGeneration != 1 {
		t.Fatalf("first condition: %+v", c)
	}
	if again := desiredStatus(first, 1, 1, 0, t1); !equality.Semantic.DeepEqual(first, again) {
		t.Fatalf("a converged status changed: %+v", again)
	}
	next := desiredStatus(first, 2, 2, 0, t1)
	if !next.Conditions[0].LastTransitionTime.Equal(&t0) || next.Conditions[0].Message != "0/2 replicas ready" {
		t.Fatalf("same condition status must keep its transition time: %+v", next.Conditions[0])
	}
	running := desiredStatus(next, 2, 2, 2, t1)
	if running.Phase != "Running" || running.Conditions[0].Status != metav1.ConditionTrue || !running.Conditions[0].LastTransitionTime.Equal(&t1) {
		t.Fatalf("running: %+v", running)
	}
	// A written 0 is in the merge patch.
	body, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["readyReplicas"] != float64(0) {
		t.Fatalf("readyReplicas missing from %s", body)
	}
}

func TestFinalizerPatchOnlyWhenNeeded(t *testing.T) {
	cases := []struct {
		finalizers []string
		add        bool
		want       string
	}{
		{nil, true, `[{"op":"add","path":"/metadata/finalizers","value":["example.com/controller-runtime-webapp"]}]`},
		{[]string{finalizer}, true, ``},
		{nil, false, ``},
		{[]string{"other"}, true, `[{"op":"test","path":"/metadata/finalizers","value":["other"]},{"op":"add","path":"/metadata/finalizers/-","value":"example.com/controller-runtime-webapp"}]`},
		{[]string{"other", finalizer}, false, `[{"op":"test","path":"/metadata/finalizers/1","value":"example.com/controller-runtime-webapp"},{"op":"remove","path":"/metadata/finalizers/1"}]`},
	}
	for _, c := range cases {
		got, err := finalizerPatch(c.finalizers, c.add)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("finalizerPatch(%v, %v) = %s, want %s", c.finalizers, c.add, got, c.want)
		}
	}
}

func TestChildrenAreOwnedAndLabelled(t *testing.T) {
	app := &WebApp{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u1"},
		Spec:       WebAppSpec{Replicas: 2, Image: "nginx:1.27"},
	}
	deployment, service := children(app)
	if *deployment.Namespace != "ns" || *deployment.Spec.Replicas != 2 || deployment.Labels["app.kubernetes.io/managed-by"] != manager {
		t.Fatalf("deployment: %+v", deployment)
	}
	owner := deployment.OwnerReferences[0]
	if *owner.UID != "u1" || !*owner.Controller || *owner.Kind != "WebApp" || *owner.APIVersion != "example.com/v1" {
		t.Fatalf("owner: %+v", owner)
	}
	if p := service.Spec.Ports[0]; *p.Port != 80 || p.TargetPort.IntVal != 80 {
		t.Fatalf("service port defaults to 80: %+v", p)
	}
	if err := validate(WebAppSpec{Replicas: 11, Image: "x"}); err == nil {
		t.Fatal("11 replicas must be rejected")
	}
}
