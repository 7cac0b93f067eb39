//! What a cgroup path says about who runs in it: the Kubernetes pod (its UID
//! and QoS class), the container (its runtime's id) and the systemd unit.
//! Read from the names the kubelet and the runtimes give their cgroups, so a
//! user can join with kube-state-metrics (`kube_pod_info{uid=…}`); no
//! Kubernetes API is ever called.
//!
//! The layouts, as the kubelet and the runtimes make them (v1 and v2 alike):
//! - kubelet, systemd driver: `/kubepods.slice/kubepods-burstable.slice/
//!   kubepods-burstable-pod<uid, '-' as '_'>.slice/<container>.scope`, with
//!   `kubepods-pod<uid>.slice` right under `kubepods.slice` for Guaranteed;
//! - kubelet, cgroupfs driver: `/kubepods/burstable/pod<uid>/<container id>`,
//!   `/kubepods/pod<uid>/<id>` for Guaranteed;
//! - container scopes: `cri-containerd-<id>.scope`, `crio-<id>.scope`,
//!   `docker-<id>.scope`, `libpod-<id>.scope` (podman); docker's cgroupfs
//!   driver `/docker/<id>`.

pub use crate::model::Workload;

/// Container scopes the runtimes make under systemd: prefix, then the id.
const SCOPE_PREFIXES: [&str; 5] = [
    "cri-containerd-",
    "crio-",
    "docker-",
    "libpod-",
    "containerd-",
];

/// The workload `path` (a cgroup path under its hierarchy's root) names.
pub fn workload_of(path: &str) -> Workload {
    let mut workload = Workload::default();
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let in_kubepods = components
        .first()
        .is_some_and(|first| *first == "kubepods" || *first == "kubepods.slice");
    for (index, component) in components.iter().enumerate() {
        if in_kubepods {
            if let Some((qos, uid)) = pod_slice(component) {
                workload.pod_uid = Some(uid);
                workload.qos = Some(qos.unwrap_or_else(|| qos_of(&components[..index])));
                continue;
            }
            if let Some(uid) = component.strip_prefix("pod").filter(|uid| is_uid(uid)) {
                workload.pod_uid = Some(uid.to_string());
                workload.qos = Some(qos_of(&components[..index]));
                continue;
            }
        }
        if let Some(id) = container_scope(component) {
            workload.container_id = Some(id);
            continue;
        }
        // cgroupfs drivers name the container by its bare id, under a pod
        // or under /docker.
        let parent = index.checked_sub(1).map(|i| components[i]);
        if is_container_id(component)
            && (workload.pod_uid.is_some() && index + 1 == components.len()
                || parent == Some("docker"))
        {
            workload.container_id = Some(component.to_string());
            continue;
        }
        let is_unit = [".service", ".scope"]
            .iter()
            .any(|suffix| component.ends_with(suffix));
        if is_unit && !in_kubepods {
            workload.unit = Some(component.to_string());
        }
    }
    workload
}

/// `kubepods-burstable-pod<uid>.slice` → (Some("burstable"), uid);
/// `kubepods-pod<uid>.slice` → (None: Guaranteed, or read from the parent).
fn pod_slice(component: &str) -> Option<(Option<String>, String)> {
    let name = component
        .strip_suffix(".slice")?
        .strip_prefix("kubepods-")?;
    let (qos, uid) = match name.split_once("-pod") {
        Some((qos, uid)) => (Some(qos.to_string()), uid),
        None => (None, name.strip_prefix("pod")?),
    };
    // systemd escapes the UID's dashes as underscores.
    let uid = uid.replace('_', "-");
    is_uid(&uid).then_some((qos, uid))
}

/// The QoS class the pod's parent cgroups name; Guaranteed pods sit right
/// under kubepods.
fn qos_of(parents: &[&str]) -> String {
    for parent in parents.iter().rev() {
        for qos in ["burstable", "besteffort"] {
            if *parent == qos || *parent == format!("kubepods-{qos}.slice") {
                return qos.to_string();
            }
        }
    }
    "guaranteed".to_string()
}

fn container_scope(component: &str) -> Option<String> {
    let name = component.strip_suffix(".scope")?;
    SCOPE_PREFIXES.iter().find_map(|prefix| {
        name.strip_prefix(prefix)
            .filter(|id| is_container_id(id))
            .map(str::to_string)
    })
}

/// A runtime's container id: 64 lowercase hex digits.
fn is_container_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A pod UID: 36 characters, 8-4-4-4-12 hex digits.
fn is_uid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0d4a7e5c-3b1f-4c2a-9e8d-1f2a3b4c5d6e";
    const ID: &str = "3f1c2b7a9d8e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";

    fn uid_escaped() -> String {
        UID.replace('-', "_")
    }

    #[test]
    fn the_kubelets_systemd_layout_names_pod_qos_and_container() {
        for (runtime, qos_slice, qos) in [
            (
                "cri-containerd",
                "kubepods-burstable.slice/kubepods-burstable",
                "burstable",
            ),
            (
                "crio",
                "kubepods-besteffort.slice/kubepods-besteffort",
                "besteffort",
            ),
            ("docker", "kubepods", "guaranteed"),
        ] {
            let path = format!(
                "/kubepods.slice/{qos_slice}-pod{}.slice/{runtime}-{ID}.scope",
                uid_escaped()
            );
            let path = path.replace("/kubepods/kubepods", "/kubepods");
            assert_eq!(
                workload_of(&path),
                Workload {
                    pod_uid: Some(UID.into()),
                    qos: Some(qos.into()),
                    container_id: Some(ID.into()),
                    unit: None,
                },
                "{path}"
            );
        }
    }

    #[test]
    fn the_kubelets_cgroupfs_layout_names_pod_qos_and_container() {
        assert_eq!(
            workload_of(&format!("/kubepods/burstable/pod{UID}/{ID}")),
            Workload {
                pod_uid: Some(UID.into()),
                qos: Some("burstable".into()),
                container_id: Some(ID.into()),
                unit: None,
            }
        );
        let guaranteed = workload_of(&format!("/kubepods/pod{UID}"));
        assert_eq!(guaranteed.qos.as_deref(), Some("guaranteed"));
        assert_eq!(guaranteed.container_id, None);
    }

    #[test]
    fn runtimes_and_systemd_outside_kubernetes() {
        let podman = workload_of(&format!(
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
        ));
        assert_eq!(podman.container_id.as_deref(), Some(ID));
        assert_eq!(podman.unit.as_deref(), Some("user@1000.service"));
        assert_eq!(podman.pod_uid, None);
        assert_eq!(
            workload_of(&format!("/docker/{ID}"))
                .container_id
                .as_deref(),
            Some(ID)
        );
        assert_eq!(
            workload_of("/system.slice/nginx.service").unit.as_deref(),
            Some("nginx.service")
        );
        assert!(workload_of("/").is_empty());
        assert!(workload_of("/iosplit-attr-a-123").is_empty());
        // A name that only looks like one is not a pod.
        assert!(workload_of("/kubepods/podcast").pod_uid.is_none());
    }
}
