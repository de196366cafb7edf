//! Reading how many terms a Lease has issued, to tell a later leader's
//! fencing token from a forged one ([`super::FencingToken::judge_later_term`]).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use super::token::FencingToken;

/// The latest term the Lease `token` names has issued (its
/// `leaseTransitions` now), or `None` when it cannot be read, is gone, or
/// is another Lease by now (another uid): the caller then treats a later
/// term as issued, the side that writes nothing.
pub async fn issued_term(client: &kube::Client, token: &FencingToken) -> Option<u64> {
    let (namespace, name, uid) = token.lease_parts()?;
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = match api.get_opt(name).await {
        Ok(lease) => lease?,
        Err(error) => {
            tracing::warn!(lease = %token.lease, %error, "cannot read the Lease to judge a later fencing token; treating it as issued");
            return None;
        }
    };
    if lease.metadata.uid.as_deref() != Some(uid) {
        return None;
    }
    lease
        .spec
        .and_then(|spec| spec.lease_transitions)
        .and_then(|transitions| u64::try_from(transitions).ok())
}
