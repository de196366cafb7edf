package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// groupVersion is the WebApp's API group and version (examples/webapp/crd.yaml).
var groupVersion = schema.GroupVersion{Group: "example.com", Version: "v1"}

// WebApp is the custom resource of plugins/webapp, typed as a kubebuilder
// project would type it (the deep copies are written by hand instead of by
// controller-gen: the type is small).
type WebApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebAppSpec   `json:"spec"`
	Status WebAppStatus `json:"status,omitzero"`
}

// WebAppSpec is what the user asks for.
type WebAppSpec struct {
	// Replicas is the number of pods to run, 1..10.
	Replicas int32 `json:"replicas"`
	// Image is the container image.
	Image string `json:"image"`
	// Port is the container port, also exposed by the Service; 80 when unset.
	Port int32 `json:"port,omitempty"`
}

// WebAppStatus is what the controller reports.
type WebAppStatus struct {
	// ReadyReplicas is the Deployment's ready pods; a pointer so that an
	// unwritten status is told apart from a written 0.
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`
	// Phase is Pending until every replica is ready, then Running.
	Phase string `json:"phase,omitempty"`
	// ObservedGeneration is the generation this status was computed for.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions holds Ready.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WebAppList is a list of WebApps, as the cache's informer lists them.
type WebAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebApp `json:"items"`
}

// DeepCopyInto copies every field of s into out.
func (s *WebAppStatus) DeepCopyInto(out *WebAppStatus) {
	*out = *s
	if s.ReadyReplicas != nil {
		v := *s.ReadyReplicas
		out.ReadyReplicas = &v
	}
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}

// DeepCopyInto copies every field of w into out.
func (w *WebApp) DeepCopyInto(out *WebApp) {
	*out = *w
	out.TypeMeta = w.TypeMeta
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec = w.Spec
	w.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a copy of w sharing nothing with it.
func (w *WebApp) DeepCopy() *WebApp {
	if w == nil {
		return nil
	}
	out := new(WebApp)
	w.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (w *WebApp) DeepCopyObject() runtime.Object { return w.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *WebAppList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := new(WebAppList)
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]WebApp, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// addToScheme registers WebApp and WebAppList.
func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(groupVersion, &WebApp{}, &WebAppList{})
	metav1.AddToGroupVersion(s, groupVersion)
	return nil
}
