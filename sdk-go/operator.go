// Package operator is the wasm-operator plugin SDK for Go (standard Go
// >= 1.24: GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared, //go:wasmexport).
//
// A plugin is a function of observed state: the host hands it the primary
// object and the children it owns, as plain maps (JSON numbers are
// json.Number, so integers round-trip exactly); the plugin answers with a
// Desired (children, status, conditions, events). The package main of a
// plugin registers one Plugin from an init function:
//
//	import operator "wasm-operator.dev/sdk-go"
//
//	func init() {
//		operator.Register(operator.Plugin{
//			Name: "webapp", Version: "1.0.0",
//			Primary: operator.Namespaced("example.com", "v1", "WebApp", "webapps"),
//			Owns:    []operator.Kind{operator.Deployment},
//			Reconcile: func(ctx operator.Context, obj operator.Object, children operator.Children) (operator.Desired, error) {
//				return operator.Desired{Children: []any{operator.Object{...}}}, nil
//			},
//		})
//	}
//
//	func main() {} // required, never called: the host calls the exports
//
// Failures: return operator.Transient(...) (retried with backoff) or
// operator.Permanent(...) (the host waits for the object to change); any
// other error is transient with the error's text. A panic in Reconcile or
// Finalize (on the calling goroutine) is recovered and becomes a transient
// failure naming the panic value and the innermost source line outside the
// runtime and this SDK, e.g. `panic: runtime error: integer divide by zero
// (at app.go:35 in main.ratio)`; the stack goes to the host log. What the
// Go runtime cannot recover (a panic on another goroutine, a deadlock,
// `fatal error: ...`) exits the program, and unbounded recursion exhausts
// wasm's call stack: the call traps (PluginTrap), and the runtime's message
// is lost with stderr.
//
// This package implements the canonical ABI of the `reconciler-plugin` world
// of wit/plugin.wit by hand (what wit-bindgen would generate): the
// reconciler exports (manifest, reconcile, finalize, their post-returns,
// cabi_realloc) and the cache and log imports. The optional interfaces of the
// `plugin` world (migration, migration-functions, schema, backup) are not
// exported, so a Go plugin declares none of them and carries no CRD.
//
// The package builds natively too (go vet, go test of a plugin's functions
// on the developer's machine): there Log writes to stderr and cache reads
// fail; only GOOS=wasip1 has the exports and the host's imports.
//
// Build (scripts/build-lang-plugins.sh, docs/languages.md): go build the
// main package to a wasip1 reactor, `jco embed` the world, then `jco new
// --adapt wasi_snapshot_preview1=` the adapter built from wasi-stub.wat in
// this directory, a WASI with no outside world: the component imports
// nothing but wasm-operator:plugin.
package operator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Object is a Kubernetes object (or a fragment of one) as plain JSON values:
// map[string]any, []any, string, bool, json.Number, nil.
//
// An Object serializes with its keys sorted, a struct with its fields in
// their order. The host keeps the order of the keys a plugin returns (it
// shows in the applied objects and `plugin test` fixtures, not in what they
// mean): to answer exactly like another port, return a struct.
type Object = map[string]any

// Kind is a Kubernetes resource kind: group ("" for core), version, kind,
// plural, scope.
type Kind struct {
	Group, Version, Kind, Plural string
	ClusterScoped                bool
}

// Namespaced is a namespaced kind.
func Namespaced(group, version, kind, plural string) Kind {
	return Kind{Group: group, Version: version, Kind: kind, Plural: plural}
}

// Cluster is a cluster-scoped kind.
func Cluster(group, version, kind, plural string) Kind {
	return Kind{Group: group, Version: version, Kind: kind, Plural: plural, ClusterScoped: true}
}

// APIVersion is `group/version`, or `version` for the core group.
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// Kinds plugins commonly own.
var (
	Deployment = Namespaced("apps", "v1", "Deployment", "deployments")
	Service    = Namespaced("", "v1", "Service", "services")
	ConfigMap  = Namespaced("", "v1", "ConfigMap", "configmaps")
	Secret     = Namespaced("", "v1", "Secret", "secrets")
)

// Context is what the host knows about a call beyond the object.
type Context struct {
	PluginVersion string
	// Attempt is 1 for the first attempt and grows with every retry.
	Attempt uint32
	// ManagedByVersion is the plugin version that last managed the object,
	// "" when none.
	ManagedByVersion string
	// Config is the `config` of the plugin's deployment ({} when unset).
	Config Object
}

// Condition is a status condition on the primary (the host adds the times).
type Condition struct {
	Type    string
	Status  string // True, False or Unknown
	Reason  string
	Message string
}

// Ready is the `Ready` condition, `True` when ready.
func Ready(ready bool, reason, message string) Condition {
	status := "False"
	if ready {
		status = "True"
	}
	return Condition{Type: "Ready", Status: status, Reason: reason, Message: message}
}

// Event is an event the host records on the primary.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Normal is a `Normal` event.
func Normal(reason, message string) Event { return Event{Reason: reason, Message: message} }

// Warning is a `Warning` event.
func Warning(reason, message string) Event {
	return Event{Warning: true, Reason: reason, Message: message}
}

// Desired is the answer to Reconcile.
type Desired struct {
	// The complete desired set of owned children, each a full object with
	// apiVersion, kind and metadata.name: an Object, or any value
	// encoding/json serializes to one (a struct with json tags).
	Children []any
	// Fields to merge into the primary's status (an Object or a struct);
	// nil leaves it alone.
	Status any
	// Conditions to set on the primary, merged by type.
	Conditions []Condition
	// Events to record on the primary.
	Events []Event
	// Reconcile again after this long even if nothing changes (0: never).
	RequeueAfter time.Duration
}

// Failure fails a call: a transient one is retried with backoff, a
// permanent one waits for the object to change.
type Failure struct {
	Permanent bool
	Message   string
}

func (f *Failure) Error() string { return f.Message }

// Transient is a failure worth retrying.
func Transient(format string, args ...any) error {
	return &Failure{Message: fmt.Sprintf(format, args...)}
}

// Permanent is a failure retrying will not help.
func Permanent(format string, args ...any) error {
	return &Failure{Permanent: true, Message: fmt.Sprintf(format, args...)}
}

// Finalized is the answer to Finalize: Done, or Wait(d).
type Finalized struct {
	wait    time.Duration
	waiting bool
}

// Done says clean-up is complete: the host removes the finalizer.
var Done = Finalized{}

// Wait says clean-up is under way: call Finalize again after d.
func Wait(d time.Duration) Finalized { return Finalized{wait: d, waiting: true} }

// Children are the owned children that exist now.
type Children []Object

// Get is the child of kind named name, or nil.
func (c Children) Get(kind Kind, name string) Object {
	for _, o := range c {
		if isKind(o, kind) && Field(o, "metadata", "name") == name {
			return o
		}
	}
	return nil
}

// Of is every child of kind.
func (c Children) Of(kind Kind) []Object {
	var out []Object
	for _, o := range c {
		if isKind(o, kind) {
			out = append(out, o)
		}
	}
	return out
}

func isKind(o Object, k Kind) bool {
	return o["apiVersion"] == k.APIVersion() && o["kind"] == k.Kind
}

// Field is the value at path in nested objects (Field(app, "spec",
// "replicas")), or nil when a step is missing or not an object.
func Field(v any, path ...string) any {
	for _, key := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[key]
	}
	return v
}

// Int is v as an integer, when it is a JSON integer (or a Go integer).
func Int(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		i := int64(n)
		return i, float64(i) == n
	}
	return 0, false
}

// Level is the level of a log record.
type Level uint32

// The log levels of the host's `log` import.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Log writes one record into the host's log, tagged with the plugin and
// the object in hand.
func Log(level Level, message string) { hostLogString(level, message) }

// Logf is Log with a fmt.Sprintf message.
func Logf(level Level, format string, args ...any) {
	hostLogString(level, fmt.Sprintf(format, args...))
}

// CacheError is the host's refusal of a cache read.
type CacheError string

func (e CacheError) Error() string { return string(e) }

// CacheGet is one object from the host's cache, nil when it does not exist.
// Its kind must be the primary, owned or watched; namespace "" is none (a
// cluster-scoped kind).
func CacheGet(kind Kind, name, namespace string) (Object, error) {
	text, found, err := cacheGet(kind.APIVersion(), kind.Kind, namespace, name)
	if err != nil || !found {
		return nil, err
	}
	return decodeObject(text)
}

// CacheList is the objects of kind in the host's cache, in namespace ("":
// all) and matching selector ("": all, else e.g. `app=web,tier in (a,b)`).
func CacheList(kind Kind, namespace, selector string) ([]Object, error) {
	texts, err := cacheList(kind.APIVersion(), kind.Kind, namespace, selector)
	if err != nil {
		return nil, err
	}
	out := make([]Object, len(texts))
	for i, t := range texts {
		if out[i], err = decodeObject(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Plugin is a plugin's manifest and functions.
type Plugin struct {
	// Stable plugin name, e.g. `webapp`.
	Name string
	// Semantic version of this build, e.g. `1.2.0`.
	Version string
	// One line for humans.
	Description string
	// The kind this plugin reconciles.
	Primary Kind
	// Kinds it creates as children; kinds it only reads through the cache.
	Owns, Watches []Kind
	// Ask the host for a finalizer and a Finalize call before deletion.
	Finalizer bool
	// Objects this version reconciled cannot be served by older versions
	// ("": any older version may serve them).
	MinCompatibleVersion string
	// Reconcile computes the desired state of one primary object.
	Reconcile func(ctx Context, obj Object, children Children) (Desired, error)
	// Finalize cleans up before the primary is deleted (nil: Done).
	Finalize func(ctx Context, obj Object, children Children) (Finalized, error)
}

var registered *Plugin

// Register makes p the plugin the component exports; call it once, from an
// init function of package main.
func Register(p Plugin) {
	if registered != nil {
		panic("wasm-operator: Register called twice")
	}
	registered = &p
}

func plugin() *Plugin {
	if registered == nil {
		panic("wasm-operator: no plugin registered: call operator.Register from an init function of package main")
	}
	return registered
}

func decodeObject(text string) (Object, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var obj Object
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// encode is compact JSON without HTML escaping, like serde_json: the host
// compares and hashes these texts.
func encode(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// asFailure is err as the call's failure: a *Failure anywhere in its chain,
// else a transient failure with its text.
func asFailure(err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	return &Failure{Message: err.Error()}
}
