use serde_json::json;

use super::*;

fn rt(group: &str, plural: &str) -> ResourceType {
    crate::registry::builtins()
        .into_iter()
        .find(|r| r.group == group && r.plural == plural)
        .unwrap()
}

const SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_ERROR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

#[test]
fn subdomains_labels_and_path_segments_as_kube_apiserver_words_them() {
    use NameRule::*;
    assert!(problems(Dns1123Subdomain, "web.example-1", false).is_empty());
    assert_eq!(
        problems(Dns1123Subdomain, "Bad_Name", false),
        [SUBDOMAIN_ERROR]
    );
    assert_eq!(problems(Dns1123Subdomain, "a..b", false), [SUBDOMAIN_ERROR]);
    assert_eq!(
        problems(Dns1123Subdomain, &"a".repeat(254), false),
        ["must be no more than 253 characters"]
    );
    assert!(problems(Dns1123Label, "1abc", false).is_empty());
    assert_eq!(
        problems(Dns1123Label, "a.b", false),
        ["must not contain dots"]
    );
    assert_eq!(problems(Dns1123Label, "Bad_NS", false), [LABEL_ERROR]);
    assert_eq!(
        problems(Dns1123Label, &"a".repeat(64), false),
        ["must be no more than 63 characters"]
    );
    assert!(problems(PathSegment, "system:controller:x", false).is_empty());
    assert_eq!(
        problems(PathSegment, "a:b/c", false),
        ["may not contain '/'"]
    );
    assert_eq!(problems(PathSegment, "..", false), ["may not be '..'"]);
    assert!(problems(PathSegment, "..", true).is_empty());
    // A generateName may end with '-'.
    assert!(problems(Dns1123Subdomain, "web-", true).is_empty());
    assert_eq!(problems(Dns1123Subdomain, "web-", false), [SUBDOMAIN_ERROR]);
}

#[test]
fn kinds_follow_their_rules() {
    assert_eq!(rule_for(&rt("", "namespaces")), NameRule::Dns1123Label);
    assert_eq!(rule_for(&rt("", "services")), NameRule::Dns1123Label);
    assert_eq!(
        rule_for(&rt("apps", "statefulsets")),
        NameRule::Dns1123Label
    );
    assert_eq!(
        rule_for(&rt("rbac.authorization.k8s.io", "clusterroles")),
        NameRule::PathSegment
    );
    assert_eq!(rule_for(&rt("", "configmaps")), NameRule::Dns1123Subdomain);
    assert_eq!(
        rule_for(&rt("apps", "deployments")),
        NameRule::Dns1123Subdomain
    );
}

#[test]
fn an_invalid_generate_name_is_reported_with_the_name_it_generated() {
    let obj = json!({"metadata": {"generateName": "Bad_", "name": "Bad_x7k2p"}});
    let causes = create_causes(&rt("", "configmaps"), &obj);
    assert_eq!(
        causes,
        [
            (
                "FieldValueInvalid".to_string(),
                "metadata.generateName".to_string(),
                format!("Invalid value: \"Bad_\": {SUBDOMAIN_ERROR}")
            ),
            (
                "FieldValueInvalid".to_string(),
                "metadata.name".to_string(),
                format!("Invalid value: \"Bad_x7k2p\": {SUBDOMAIN_ERROR}")
            ),
        ]
    );
    let long = "a".repeat(64);
    let causes = create_causes(&rt("", "namespaces"), &json!({"metadata": {"name": long}}));
    let fields: Vec<&str> = causes.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(fields, ["metadata.name", "metadata.labels"]);
}
