//! The container a process runs in, from the text of `/proc/PID/cgroup`: a pure function over
//! `&[u8]` (the twin of `parse_cgroup` in `python/enginespec/_host/fallback/cgroup.py`, same
//! results).
//!
//! The text is untrusted (a process in a delegated cgroup names its own sub-cgroups), so nothing
//! here may panic: an id is only ever 64 lowercase hex digits, a pod uid a UUID or 32 hex digits.

/// Where a cgroup path places a process: the runtime it names, the container's full id and the
/// Kubernetes pod's uid (dashes, never underscores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupContainer {
    pub runtime: &'static str,
    pub id: String,
    pub pod_uid: Option<String>,
}

/// Scope (systemd driver) and directory (cgroupfs driver) prefixes, and the runtime each names.
/// Podman's `libpod-conmon-<id>.scope` holds its monitor, not the container: no prefix takes it.
const PREFIXES: [(&[u8], &str); 4] = [
    (b"docker", "docker"),
    (b"libpod", "podman"),
    (b"cri-containerd", "containerd"),
    (b"crio", "cri-o"),
];

fn is_hex(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

fn is_id(bytes: &[u8]) -> bool {
    bytes.len() == 64 && is_hex(bytes)
}

/// A pod uid: a UUID (dashes in cgroupfs paths, underscores in systemd slice names, either at
/// each place), or 32 hex digits (a static pod's manifest hash); given back with dashes.
fn pod_uid(bytes: &[u8]) -> Option<String> {
    let uuid = bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-' || *b == b'_',
            _ => is_hex(std::slice::from_ref(b)),
        });
    if !(uuid || (bytes.len() == 32 && is_hex(bytes))) {
        return None;
    }
    let text: String = bytes.iter().map(|&b| b as char).collect();
    Some(text.replace('_', "-"))
}

/// `pod<uid>`: kubelet's cgroupfs driver.
fn pod_dir(component: &[u8]) -> Option<String> {
    pod_uid(component.strip_prefix(b"pod")?)
}

/// `kubepods-burstable-pod<uid>.slice` (kind adds a `kubelet-` prefix): kubelet's systemd driver.
fn pod_slice(component: &[u8]) -> Option<String> {
    let name = component.strip_suffix(b".slice")?;
    [36, 32].into_iter().find_map(|len| {
        let split = name.len().checked_sub(len + 4)?;
        let (head, tail) = name.split_at(split);
        let uid = pod_uid(tail.strip_prefix(b"-pod")?)?;
        // head is `(?:[a-z0-9]+-)*kubepods(?:-[a-z]+)*`
        let words: Vec<&[u8]> = head.split(|&b| b == b'-').collect();
        let fits = words.iter().enumerate().any(|(k, word)| {
            *word == b"kubepods"
                && words[..k].iter().all(|w| {
                    !w.is_empty()
                        && w.iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                })
                && words[k + 1..]
                    .iter()
                    .all(|w| !w.is_empty() && w.iter().all(u8::is_ascii_lowercase))
        });
        fits.then_some(uid)
    })
}

/// `docker-<id>.scope`, `libpod-<id>.scope`, `cri-containerd-<id>.scope`, `crio-<id>.scope`,
/// podman's cgroupfs `libpod-<id>`.
fn scope(component: &[u8]) -> Option<(&'static str, &[u8])> {
    PREFIXES.iter().find_map(|(prefix, runtime)| {
        let rest = component.strip_prefix(*prefix)?.strip_prefix(b"-")?;
        let id = rest.strip_suffix(b".scope").unwrap_or(rest);
        is_id(id).then_some((*runtime, id))
    })
}

/// Kubelet's systemd driver on cgroup v1 through containerd names the container inside one
/// component: `kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`.
fn triple(component: &[u8]) -> Option<(&[u8], &'static str, &[u8])> {
    let mut parts = component.split(|&b| b == b':');
    let (slice, prefix, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !is_id(id) {
        return None;
    }
    let runtime = PREFIXES.iter().find(|(p, _)| *p == prefix)?.1;
    Some((slice, runtime, id))
}

fn container(runtime: &'static str, id: &[u8], pod: &Option<String>) -> CgroupContainer {
    CgroupContainer {
        runtime,
        id: id.iter().map(|&b| b as char).collect(),
        pod_uid: pod.clone(),
    }
}

/// The innermost container one cgroup path names (docker-in-docker, kind: the last one wins).
fn innermost(path: &[u8]) -> Option<CgroupContainer> {
    let mut found = None;
    let mut pod: Option<String> = None;
    let mut previous: &[u8] = b"";
    for component in path.split(|&b| b == b'/') {
        if component.ends_with(b".mount") {
            continue;
        }
        let triple = triple(component);
        let named_pod = pod_slice(triple.map_or(component, |t| t.0)).or_else(|| pod_dir(component));
        if named_pod.is_some() {
            pod = named_pod;
        }
        if let Some((_, runtime, id)) = triple {
            found = Some(container(runtime, id, &pod));
        } else if let Some((runtime, id)) = scope(component) {
            found = Some(container(runtime, id, &pod));
        } else if is_id(component) {
            // A bare id: Docker's cgroupfs driver (`/docker/<id>`), or kubelet's
            // (`pod<uid>/<id>`) where the path does not say which runtime runs it.
            if previous == b"docker" {
                found = Some(container("docker", component, &pod));
            } else if pod.is_some() && pod_dir(previous).is_some() {
                found = Some(container("kubernetes", component, &pod));
            }
        }
        previous = component;
    }
    found
}

/// The container `/proc/PID/cgroup` places a process in, or `None` on the host. The cgroup v2
/// line (`0::PATH`) is read first, then the v1 lines (`N:CONTROLLERS:PATH`) in order.
pub fn parse_cgroup(data: &[u8]) -> Option<CgroupContainer> {
    let mut paths: Vec<(bool, &[u8])> = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let mut fields = line.splitn(3, |&b| b == b':');
        if let (Some(number), Some(_controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        {
            paths.push((number != b"0", path));
        }
    }
    paths.sort_by_key(|(v1, _)| *v1); // stable: file order within v2 and within v1
    paths.into_iter().find_map(|(_, path)| innermost(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3c2b1a4f3c2b1a4f3c2b1a4f3c2b1a4f3c2b1a4f3c2b1a4f3c2b1a4f3c2b1a";
    const UID: &str = "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b";

    fn parsed(text: &str) -> Option<(&'static str, String, Option<String>)> {
        parse_cgroup(text.as_bytes()).map(|c| (c.runtime, c.id, c.pod_uid))
    }

    #[test]
    fn shapes() {
        let slice_uid = UID.replace('-', "_");
        let pod = Some(UID.to_string());
        let cases = [
            (format!("0::/docker/{ID}"), "docker", None),
            (format!("0::/system.slice/docker-{ID}.scope"), "docker", None),
            (format!("0::/machine.slice/libpod-{ID}.scope/container"), "podman", None),
            (format!("4:memory:/kubepods/burstable/pod{UID}/{ID}"), "kubernetes", pod.clone()),
            (
                format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{ID}.scope"),
                "containerd",
                pod.clone(),
            ),
            (format!("0::/kubepods.slice/kubepods-besteffort-pod{slice_uid}.slice/crio-{ID}.scope"), "cri-o", pod.clone()),
            (
                format!("3:cpu,cpuacct:/system.slice/containerd.service/kubepods-burstable-pod{slice_uid}.slice:cri-containerd:{ID}"),
                "containerd",
                pod.clone(),
            ),
            (format!("0::/docker/{}/docker/{ID}", "0".repeat(64)), "docker", None),
        ];
        for (text, runtime, pod) in cases {
            assert_eq!(
                parsed(&text),
                Some((runtime, ID.to_string(), pod)),
                "{text}"
            );
        }
    }

    #[test]
    fn not_containers() {
        for text in [
            format!("0::/machine.slice/libpod-conmon-{ID}.scope"),
            format!("0::/system.slice/var-lib-docker-{ID}.mount"),
            format!("0::/{ID}"),
            format!("0::/docker/{}", ID.to_uppercase()),
            "0::/user.slice".to_string(),
            String::new(),
            "::\n0:\n:".to_string(),
        ] {
            assert_eq!(parsed(&text), None, "{text}");
        }
    }

    #[test]
    fn v2_line_first() {
        let other = "ab".repeat(32);
        let text = format!("4:memory:/docker/{other}\n0::/docker/{ID}\n");
        assert_eq!(parsed(&text).map(|c| c.1), Some(ID.to_string()));
    }
}
