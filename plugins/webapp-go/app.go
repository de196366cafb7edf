// The WebApp operator in Go: the same logic as the Rust webapp plugin
// (plugins/webapp, plugins/webapp-logic) and its Python and TypeScript
// ports. A `WebApp` (`example.com/v1`) becomes a Deployment and a Service,
// and its status reports how many replicas are ready.
//
// Built by scripts/build-lang-plugins.sh into webapp_go.wasm.
package main

import (
	"fmt"

	operator "wasm-operator.dev/sdk-go"
)

func init() {
	operator.Register(operator.Plugin{
		Name:        "webapp",
		Version:     "1.0.0",
		Description: "Runs a web application as a Deployment and a Service",
		Primary:     operator.Namespaced("example.com", "v1", "WebApp", "webapps"),
		Owns:        []operator.Kind{operator.Deployment, operator.Service},
		Finalizer:   true,
		Reconcile:   reconcile,
		Finalize:    finalize,
	})
}

func main() {} // never called: the host calls the plugin's exports

func reconcile(_ operator.Context, app operator.Object, children operator.Children) (operator.Desired, error) {
	spec, _ := app["spec"].(map[string]any)
	replicasValue := spec["replicas"]
	portValue, hasPort := spec["port"]
	if !hasPort {
		portValue = 80
	}
	image, _ := spec["image"].(string)
	replicas, replicasOK := operator.Int(replicasValue)
	port, portOK := operator.Int(portValue)
	// The CRD validates these too; an object stored before the schema was
	// tightened must not turn into an invalid Deployment.
	if !(replicasOK && 1 <= replicas && replicas <= 10 && portOK && 1 <= port && port <= 65535 && image != "") {
		return operator.Desired{}, operator.Permanent(
			"spec is invalid: replicas must be 1..10 (got %v), port 1..65535 (got %v), image non-empty",
			replicasValue, portValue)
	}
	meta, _ := app["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ready, _ := operator.Int(operator.Field(children.Get(operator.Deployment, name), "status", "readyReplicas"))
	running := ready >= replicas
	message := fmt.Sprintf("%d/%d replicas ready", ready, replicas)
	phase, reason := "Pending", "ReplicasNotReady"
	if running {
		phase, reason = "Running", "AllReplicasReady"
	}
	desired := operator.Desired{
		Children:   childrenOf(meta, replicas, image, port),
		Status:     status{ReadyReplicas: ready, Phase: phase},
		Conditions: []operator.Condition{operator.Ready(running, reason, message)},
	}
	// One event per change of phase (not one per reconcile).
	before, _ := operator.Field(app, "status", "phase").(string)
	if event, ok := phaseEvent(before, phase, message); ok {
		desired.Events = append(desired.Events, event)
	}
	return desired, nil
}

// status is what the plugin reports; a struct, so that its fields serialize
// in the Rust plugin's order (an Object's keys serialize sorted).
type status struct {
	ReadyReplicas int64  `json:"readyReplicas"`
	Phase         string `json:"phase"`
}

// phaseEvent is the event for a change of phase from before ("" before the
// first reconcile) to now, if any.
func phaseEvent(before, now, message string) (operator.Event, bool) {
	switch {
	case now == "Running":
		return operator.Normal("Running", message), before != "Running"
	case before == "Running":
		return operator.Normal("Pending", message), true
	}
	return operator.Event{}, false
}

func finalize(_ operator.Context, app operator.Object, _ operator.Children) (operator.Finalized, error) {
	name, _ := operator.Field(app, "metadata", "name").(string)
	operator.Logf(operator.LevelInfo, "WebApp %s is being deleted; its Deployment and Service follow", name)
	return operator.Done, nil
}

// childrenOf is the Deployment and Service a WebApp stands for, field for
// field as the Rust plugin writes them (k8s-openapi serializes fields sorted,
// like an Object's keys).
func childrenOf(meta map[string]any, replicas int64, image string, port int64) []any {
	name, _ := meta["name"].(string)
	selector := func() operator.Object { return operator.Object{"app": name} }
	metadata := func() operator.Object {
		m := operator.Object{"labels": selector(), "name": name}
		if ns, ok := meta["namespace"]; ok && ns != nil {
			m["namespace"] = ns
		}
		return m
	}
	container := operator.Object{
		"image": image,
		"name":  "web",
		"ports": []any{operator.Object{"containerPort": port}},
		"securityContext": operator.Object{
			"allowPrivilegeEscalation": false,
			"capabilities":             operator.Object{"drop": []any{"ALL"}},
		},
	}
	deployment := operator.Object{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   metadata(),
		"spec": operator.Object{
			"replicas": replicas,
			"selector": operator.Object{"matchLabels": selector()},
			"template": operator.Object{
				"metadata": operator.Object{"labels": selector()},
				"spec": operator.Object{
					// The namespace's default account, without its token.
					"automountServiceAccountToken": false,
					"containers":                   []any{container},
					"securityContext": operator.Object{
						"runAsNonRoot":   true,
						"seccompProfile": operator.Object{"type": "RuntimeDefault"},
					},
				},
			},
		},
	}
	service := operator.Object{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   metadata(),
		"spec": operator.Object{
			"ports":    []any{operator.Object{"port": port, "targetPort": port}},
			"selector": selector(),
		},
	}
	return []any{deployment, service}
}
