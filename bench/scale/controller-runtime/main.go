// Command controller-runtime-webapp is the webapp plugin's logic
// (plugins/webapp-logic) as a controller-runtime controller: the Go peer
// wasm-operator is measured against in the scale benchmark (bench/scale).
//
// It makes the writes the native kube-rs peer (bench/scale/src/bin/native-webapp.rs)
// and wasm-operator make for the plugin: the finalizer (a JSON patch that tests
// the list it changes, before any child exists), a forced server-side apply of
// the Deployment and the Service (always sent, owned by the WebApp through a
// controller ownerReference, field manager controller-runtime-webapp), and a
// merge patch of /status only when it changes something (readyReplicas, phase,
// observedGeneration and the Ready condition, its lastTransitionTime kept while
// its status holds).
//
// Usage:
//
//	controller-runtime-webapp --kubeconfig FILE [--concurrency 16]
//
// The manager runs with controller-runtime's defaults except: no metrics
// server, no health probes, no leader election, and MaxConcurrentReconciles
// from --concurrency. Children are read from the manager's cache (informers
// over every namespace), as the other peers read theirs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// finalizer is put on every WebApp (the plugin asks for one).
	finalizer = "example.com/controller-runtime-webapp"
	// manager is the field manager of every write and the managed-by label.
	manager = "controller-runtime-webapp"
)

func main() {
	// --kubeconfig is registered by controller-runtime's config package.
	concurrency := flag.Int("concurrency", 16, "reconciles at once (MaxConcurrentReconciles)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(*concurrency); err != nil {
		fmt.Fprintf(os.Stderr, "controller-runtime-webapp: %v\n", err)
		os.Exit(1)
	}
}

func run(concurrency int) error {
	// Client-side rate limiting is off (QPS -1), controller-runtime's default
	// for a config from GetConfig, as the kube-rs peers have none either.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig (pass --kubeconfig FILE): %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := addToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&WebApp{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Named("webapp").
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Complete(&reconciler{Client: mgr.GetClient()})
	if err != nil {
		return fmt.Errorf("creating the controller: %w", err)
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// reconciler turns a WebApp into its Deployment and Service and writes its status.
type reconciler struct {
	client.Client
}

// Reconcile makes one WebApp's children and status what its spec asks for.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var app WebApp
	if err := r.Get(ctx, req.NamespacedName, &app); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !app.DeletionTimestamp.IsZero() {
		// The children go with their owner (garbage collection); nothing
		// outside the cluster to clean up.
		patch, err := finalizerPatch(app.Finalizers, false)
		if err != nil {
			return ctrl.Result{}, err
		}
		if patch != nil {
			if err := r.Patch(ctx, &app, client.RawPatch(types.JSONPatchType, patch)); err != nil {
				return ctrl.Result{}, fmt.Errorf("removing the finalizer of WebApp %s: %w", req, err)
			}
		}
		return ctrl.Result{}, nil
	}
	patch, err := finalizerPatch(app.Finalizers, true)
	if err != nil {
		return ctrl.Result{}, err
	}
	if patch != nil {
		if err := r.Patch(ctx, &app, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer to WebApp %s: %w", req, err)
		}
	}
	if err := validate(app.Spec); err != nil {
		// Retrying cannot help until the spec changes.
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("WebApp %s: %w", req, err))
	}
	// The status reads the Deployment as the cache has it, before the apply
	// (as webapp-logic reads the children the host hands it).
	ready, err := r.readyReplicas(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	deployment, service := children(&app)
	for _, child := range []runtime.ApplyConfiguration{deployment, service} {
		if err := r.Apply(ctx, child, client.FieldOwner(manager), client.ForceOwnership); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying a child of WebApp %s: %w", req, err)
		}
	}
	next := desiredStatus(app.Status, app.Generation, app.Spec.Replicas, ready, metav1.Now())
	if equality.Semantic.DeepEqual(app.Status, next) {
		return ctrl.Result{}, nil
	}
	body, err := json.Marshal(map[string]any{"status": next})
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Status().Patch(ctx, &app, client.RawPatch(types.MergePatchType, body)); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status of WebApp %s: %w", req, err)
	}
	return ctrl.Result{}, nil
}

// readyReplicas of the WebApp's Deployment in the cache; 0 when there is none yet.
func (r *reconciler) readyReplicas(ctx context.Context, key types.NamespacedName) (int32, error) {
	var d appsv1.Deployment
	err := r.Get(ctx, key, &d)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading Deployment %s from the cache: %w", key, err)
	}
	return d.Status.ReadyReplicas, nil
}

// validate rejects what webapp-logic rejects: the CRD validates it too, but an
// object stored before the schema was tightened must not become an invalid Deployment.
func validate(spec WebAppSpec) error {
	port := portOf(spec)
	if spec.Replicas < 1 || spec.Replicas > 10 || port < 1 || port > 65535 || spec.Image == "" {
		return fmt.Errorf("spec is invalid: replicas must be 1..10 (got %d), port 1..65535 (got %d), image non-empty",
			spec.Replicas, port)
	}
	return nil
}

func portOf(spec WebAppSpec) int32 {
	if spec.Port == 0 {
		return 80
	}
	return spec.Port
}

// finalizerPatch is the JSON patch adding (add) or removing the finalizer,
// nil when there is nothing to do. Both test the list they change, so that a
// concurrent edit makes the patch fail instead of clobbering it.
func finalizerPatch(finalizers []string, add bool) ([]byte, error) {
	position := -1
	for i, f := range finalizers {
		if f == finalizer {
			position = i
			break
		}
	}
	var ops []map[string]any
	switch {
	case add && position >= 0, !add && position < 0:
		return nil, nil
	case add && len(finalizers) == 0:
		ops = []map[string]any{{"op": "add", "path": "/metadata/finalizers", "value": []string{finalizer}}}
	case add:
		ops = []map[string]any{
			{"op": "test", "path": "/metadata/finalizers", "value": finalizers},
			{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer},
		}
	default:
		path := fmt.Sprintf("/metadata/finalizers/%d", position)
		ops = []map[string]any{
			{"op": "test", "path": path, "value": finalizer},
			{"op": "remove", "path": path},
		}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, fmt.Errorf("marshalling the finalizer patch: %w", err)
	}
	return patch, nil
}

// children are the Deployment and Service the WebApp stands for
// (webapp-logic's children_of), with the WebApp as their controller owner
// and the managed-by label, as applied.
func children(app *WebApp) (*appsv1ac.DeploymentApplyConfiguration, *corev1ac.ServiceApplyConfiguration) {
	selector := map[string]string{"app": app.Name}
	labels := map[string]string{"app": app.Name, "app.kubernetes.io/managed-by": manager}
	owner := metav1ac.OwnerReference().
		WithAPIVersion(groupVersion.String()).
		WithKind("WebApp").
		WithName(app.Name).
		WithUID(app.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
	port := portOf(app.Spec)
	deployment := appsv1ac.Deployment(app.Name, app.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(app.Spec.Replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selector)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(selector).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().
					WithName("web").
					WithImage(app.Spec.Image).
					WithPorts(corev1ac.ContainerPort().WithContainerPort(port))))))
	service := corev1ac.Service(app.Name, app.Namespace).
		WithLabels(labels).
		WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().
			WithSelector(selector).
			WithPorts(corev1ac.ServicePort().WithPort(port).WithTargetPort(intstr.FromInt32(port))))
	return deployment, service
}

// desiredStatus is current with readyReplicas, phase, observedGeneration and
// the Ready condition for `ready` of `replicas` pods at `generation`
// (meta.SetStatusCondition keeps lastTransitionTime while the status holds).
func desiredStatus(current WebAppStatus, generation int64, replicas, ready int32, now metav1.Time) WebAppStatus {
	var next WebAppStatus
	current.DeepCopyInto(&next)
	running := ready >= replicas
	next.ReadyReplicas = &ready
	next.Phase = "Pending"
	reason := "ReplicasNotReady"
	status := metav1.ConditionFalse
	if running {
		next.Phase, reason, status = "Running", "AllReplicasReady", metav1.ConditionTrue
	}
	next.ObservedGeneration = generation
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{
		Type:               "Ready",
		Status:             status,
		Reason:             reason,
		Message:            fmt.Sprintf("%d/%d replicas ready", ready, replicas),
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now.Truncate(time.Second)),
	})
	return next
}
