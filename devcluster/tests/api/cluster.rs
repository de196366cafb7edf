use devcluster::{DevCluster, DevClusterOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};

use crate::{cm, start, status};

#[tokio::test]
async fn state_persists_across_restart_of_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("state.db");
    let opts = || DevClusterOptions {
        data: Some(data.clone()),
        ..Default::default()
    };
    let rv = {
        let mut c = DevCluster::start(opts()).await.unwrap();
        let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
        let made = api
            .create(&PostParams::default(), &cm("kept", &[]))
            .await
            .unwrap();
        c.stop().await;
        made.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let c = DevCluster::start(opts()).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    assert!(api.get("kept").await.is_ok());
    let next = api
        .create(&PostParams::default(), &cm("next", &[]))
        .await
        .unwrap();
    assert!(
        next.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv
    );
}

#[tokio::test]
async fn fail_next_and_restart_keep_state() {
    let mut c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    api.create(&PostParams::default(), &cm("before", &[]))
        .await
        .unwrap();
    // A client without kube's retry layer sees the injected 503 as is.
    let mut config = kube::Config::new(c.url().parse().unwrap());
    config.default_retry = false;
    let no_retry: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    c.faults()
        .fail_next("/api/v1/namespaces/default/configmaps", 1, 503);
    let e = status(no_retry.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (503, "ServiceUnavailable"));
    c.faults()
        .fail_next("/api/v1/namespaces/default/configmaps", 1, 500);
    let e = status(no_retry.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    // The default kube client retries 429 (Retry-After: 1) and 503 transparently.
    c.faults()
        .fail_next("/api/v1/namespaces/default/configmaps", 1, 429);
    c.faults()
        .fail_next("/api/v1/namespaces/default/configmaps", 1, 503);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    c.restart().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    assert!(api.get("before").await.is_ok(), "object survived restart");
}

#[tokio::test]
async fn bearer_token_is_required_when_configured() {
    let c = DevCluster::start(DevClusterOptions {
        token: Some("s3cret".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let nss: Api<Namespace> = Api::all(c.client());
    assert!(nss.get("default").await.is_ok());
    let config = kube::Config::new(c.url().parse().unwrap());
    let anonymous = kube::Client::try_from(config).unwrap();
    let e = status(
        Api::<Namespace>::all(anonymous)
            .get("default")
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
}

#[tokio::test]
async fn test_cluster_helper_gives_a_working_client() {
    let tc = devcluster::test_cluster().await;
    let nss: Api<Namespace> = Api::all(tc.client());
    assert!(nss.get("default").await.is_ok());
}
