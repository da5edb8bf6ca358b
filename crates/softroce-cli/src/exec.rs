//! `softroce exec`: run an unmodified libibverbs or librdmacm program on the emulator, by
//! putting the drop-ins `libibverbs.so.1` (crate softroce-ibverbs) and `librdmacm.so.1`
//! (crate softroce-rdmacm) first on `LD_LIBRARY_PATH`.
//!
//! Libraries such as UCX also look past libibverbs, at the files a kernel device has: a
//! character device `/dev/infiniband/uverbsN` (a device without one is skipped) and sysfs
//! attributes under `/sys/class/infiniband/<dev>/` (GID types, netdevs, NUMA node). exec
//! makes them exist for the program only: in a private mount namespace (a user namespace
//! too when not privileged) it mounts a tmpfs on `/dev/infiniband`, `/sys/class/infiniband`
//! and `/sys/class/infiniband_verbs` and writes there what the drop-in says about its
//! devices. Where a directory does not exist, its parent (`/dev`, `/sys/class`) is replaced
//! by a tmpfs holding bind mounts of all its entries plus the new directory. Nothing
//! outside the program's namespace changes. Where namespaces are not allowed (a container
//! without CAP_SYS_ADMIN whose seccomp filter refuses user namespaces) the program runs
//! without these files, after a warning saying so.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Args;

/// Arguments of `softroce exec`.
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The devices the program sees, as `name=address[:port],…` (sets `SOFTROCE_DEVICES`;
    /// default: what the environment says, else `softroce0=127.0.0.1`).
    #[arg(long, value_name = "SPEC")]
    devices: Option<String>,
    /// Do not give the program a private `/dev/infiniband` and `/sys/class/infiniband`
    /// (mount namespace): libraries that check them, such as UCX, will skip the devices.
    #[arg(long)]
    no_namespace: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// A drop-in library `softroce exec` puts first on the loader's path.
struct DropIn {
    /// The SONAME programs load it by.
    soname: &'static str,
    /// The file cargo builds.
    built: &'static str,
    /// The variable naming a file to use instead.
    variable: &'static str,
    /// The copy built with this binary (see build.rs); empty when the build linked nothing
    /// (`cargo check`).
    embedded: &'static [u8],
}

/// The drop-in libibverbs (crate softroce-ibverbs).
const IBVERBS: DropIn = DropIn {
    soname: "libibverbs.so.1",
    built: "libibverbs.so",
    variable: "SOFTROCE_IBVERBS_LIB",
    embedded: include_bytes!(env!("SOFTROCE_DROPIN_SO")),
};

/// The drop-in librdmacm (crate softroce-rdmacm), which forwards to the libibverbs one.
const RDMACM: DropIn = DropIn {
    soname: "librdmacm.so.1",
    built: "librdmacm.so",
    variable: "SOFTROCE_RDMACM_LIB",
    embedded: include_bytes!(env!("SOFTROCE_RDMACM_SO")),
};

/// A drop-in, first found of: its variable (`SOFTROCE_IBVERBS_LIB`, …); the newest of the
/// built files next to this binary (the file or its SONAME, and `deps/<file>`: cargo puts
/// them in `target/<profile>/`, and only `cargo build` refreshes the first, so after a
/// `cargo test` it is stale); `../lib/softroce/<soname>` from it (the Debian-style layout
/// `/usr/bin/softroce`, `/usr/lib/softroce/libibverbs.so.1`); the copy embedded in this
/// binary (what `cargo install` gives), written once to a private cache directory.
fn find_library(lib: &DropIn) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(lib.variable) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{}={} is not a file", lib.variable, p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating this binary: {e}"))?;
    let dir = exe.parent().unwrap_or_else(|| Path::new("."));
    let built = [
        dir.join(lib.built),
        dir.join(lib.soname),
        dir.join("deps").join(lib.built),
    ];
    let newest_built = built
        .into_iter()
        .filter_map(|p| {
            let modified = std::fs::metadata(&p)
                .ok()
                .filter(|m| m.is_file())?
                .modified()
                .ok();
            Some((modified, p))
        })
        // The first of equally new ones (or of ones whose time is unknown) wins.
        .rev()
        .max_by_key(|(modified, _)| *modified);
    if let Some((_, path)) = newest_built {
        return Ok(path);
    }
    let installed = dir.join("../lib/softroce").join(lib.soname);
    if installed.is_file() {
        return Ok(installed);
    }
    extract_embedded(lib).map_err(|e| {
        format!(
            "no {} next to {} or in ../lib/softroce/, and {e}: build it with `cargo build` \
             (same profile as softroce) or set {}",
            lib.built,
            exe.display(),
            lib.variable
        )
    })
}

/// Write the embedded library to `<cache>/softroce/dropin-<hash>/<soname>` (once per
/// content of this binary's drop-ins; later runs reuse the file) and return its path.
fn extract_embedded(lib: &DropIn) -> Result<PathBuf, String> {
    if lib.embedded.is_empty() {
        return Err("this softroce binary has no embedded copy (built without linking)".into());
    }
    // One directory for the drop-ins of this binary, named by both of their contents.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in IBVERBS.embedded.iter().chain(RDMACM.embedded) {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    let dir = private_dir(&cache_dir()?.join(format!("dropin-{hash:016x}")))?;
    let path = dir.join(lib.soname);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == lib.embedded.len() as u64) {
        return Ok(path);
    }
    // Written under another name and renamed: a concurrent run sees the whole file or none.
    let tmp = dir.join(format!("{}.{}", lib.soname, std::process::id()));
    std::fs::write(&tmp, lib.embedded)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("writing the embedded drop-in to {}: {e}", path.display()))?;
    Ok(path)
}

/// `$XDG_CACHE_HOME/softroce`, else `$HOME/.cache/softroce`, else a directory of this
/// user's in the temporary directory.
fn cache_dir() -> Result<PathBuf, String> {
    let nonempty = |v: &str| {
        std::env::var_os(v)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    };
    let base = match (nonempty("XDG_CACHE_HOME"), nonempty("HOME")) {
        (Some(cache), _) => cache,
        (None, Some(home)) => home.join(".cache"),
        (None, None) => {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            // A relative TMPDIR (or an empty one) would put it wherever the program runs.
            let tmp = Some(std::env::temp_dir())
                .filter(|t| t.is_absolute())
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            private_dir(&tmp.join(format!("softroce-cache-{uid}")))?
        }
    };
    std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
    private_dir(&base.join("softroce"))
}

/// Create `dir` (mode 0700) or accept it only if this user owns it and nobody else may
/// write there: a library loaded from a directory someone else controls would run their code.
fn private_dir(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is not a directory of this user's that only it can write to",
            dir.display()
        ));
    }
    Ok(dir.to_path_buf())
}

/// A directory holding each SONAME → its library, one per set of library paths and user,
/// reused across runs (exec leaves no chance to clean up afterwards). It comes first on the
/// program's library path, so it lives in this user's cache, private to it: under a shared
/// temporary directory another user could create it first and plant a library there.
fn library_dir(libs: &[(&DropIn, PathBuf)]) -> Result<PathBuf, String> {
    let mut resolved = Vec::new();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (lib, path) in libs {
        let path = path
            .canonicalize()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for b in path.as_os_str().as_encoded_bytes() {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        resolved.push((lib.soname, path));
    }
    let dir = private_dir(&cache_dir()?.join(format!("links-{hash:016x}")))?;
    for (soname, path) in resolved {
        let link = dir.join(soname);
        if std::fs::read_link(&link).ok().as_deref() != Some(path.as_path()) {
            // Replace atomically so concurrent runs never see a missing link.
            let tmp = dir.join(format!("{soname}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&path, &tmp)
                .and_then(|()| std::fs::rename(&tmp, &link))
                .map_err(|e| format!("linking {} to {}: {e}", link.display(), path.display()))?;
        }
    }
    Ok(dir)
}

pub(crate) fn run(args: &ExecArgs) -> ExitCode {
    let ibverbs = match find_library(&IBVERBS) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("softroce exec: {e}");
            return ExitCode::from(127);
        }
    };
    let mut libs = vec![(&IBVERBS, ibverbs)];
    // Without it the program still runs on the drop-in libibverbs; only rdma_cm is missing.
    match find_library(&RDMACM).and_then(|path| check_rdmacm(&path).map(|()| path)) {
        Ok(path) => libs.push((&RDMACM, path)),
        Err(e) => eprintln!("softroce exec: warning: {e}; rdma_cm programs will not connect"),
    }
    let dir = match library_dir(&libs) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softroce exec: {e}");
            return ExitCode::from(127);
        }
    };
    // A library that does not load is said as such (not as a fault of --devices).
    if let Err(e) = load_dropin(&dir.join("libibverbs.so.1")) {
        eprintln!("softroce exec: {e}");
        return ExitCode::from(2);
    }
    if let Some(spec) = &args.devices {
        // SAFETY: no other thread runs yet; the drop-in loaded below reads it, and the
        // program inherits it.
        unsafe { std::env::set_var("SOFTROCE_DEVICES", spec) };
        // A spec the drop-in refuses is said now, not after the program has started (and
        // perhaps done work first, or never asked for a device and so never said why).
        // Without SOFTROCE_LOG meanwhile: what it asks is the program's, said there once.
        let log = std::env::var_os("SOFTROCE_LOG");
        // SAFETY: as above.
        unsafe { std::env::remove_var("SOFTROCE_LOG") };
        let accepted = devices_accepted(&dir.join("libibverbs.so.1"));
        if let Some(log) = log {
            // SAFETY: as above.
            unsafe { std::env::set_var("SOFTROCE_LOG", log) };
        }
        if let Err(e) = accepted {
            // The drop-in said why (cut to length); the spec, which may be huge, is cut too.
            let shown = softroce_emu::faults::excerpt(spec);
            eprintln!("softroce exec: --devices {shown:?}: {e}");
            return ExitCode::from(2);
        }
    }
    if !args.no_namespace {
        if let Err(e) = private_view(&dir.join("libibverbs.so.1")) {
            eprintln!(
                "softroce exec: warning: {e}; the program sees no /dev/infiniband or \
                 /sys/class/infiniband, so libraries that check them (UCX) skip the devices"
            );
        }
    }
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("softroce exec: no program given");
        return ExitCode::from(127);
    };
    let mut cmd = Command::new(program);
    cmd.args(rest).env("LD_LIBRARY_PATH", path);
    // Only returns on failure.
    let err = cmd.exec();
    eprintln!(
        "softroce exec: running {}: {err}",
        Path::new(program).display()
    );
    ExitCode::from(127)
}

/// One entry of the drop-in's device tree (see the crate softroce-ibverbs, `sysfs.rs`).
#[derive(Debug, PartialEq, Eq)]
enum Node {
    File(PathBuf, String),
    Link(PathBuf, PathBuf),
    CharDevice(PathBuf),
}

/// The directories exec mounts a tmpfs on; every entry of the tree must lie in one.
const VIEW_DIRS: [&str; 3] = [
    "/dev/infiniband",
    "/sys/class/infiniband",
    "/sys/class/infiniband_verbs",
];

/// Parse the tree text, refusing entries outside [`VIEW_DIRS`] or with `..` (the text comes
/// from a library named by an environment variable).
fn parse_tree(text: &str) -> Result<Vec<Node>, String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut f = line.splitn(3, '\t');
        let (kind, path) = (
            f.next().unwrap_or(""),
            PathBuf::from(f.next().unwrap_or("")),
        );
        let inside = VIEW_DIRS
            .iter()
            .any(|d| path.starts_with(d) && path != Path::new(d));
        if !inside
            || path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(format!(
                "the drop-in's device tree names {}",
                path.display()
            ));
        }
        let rest = f.next().unwrap_or("").to_string();
        out.push(match kind {
            "F" => Node::File(path, rest),
            "L" => Node::Link(path, PathBuf::from(rest)),
            "C" => Node::CharDevice(path),
            _ => return Err(format!("the drop-in's device tree has a bad line {line:?}")),
        });
    }
    Ok(out)
}

/// Load the drop-in at `lib` into this process (it stays until exec replaces the process).
fn load_dropin(lib: &Path) -> Result<*mut libc::c_void, String> {
    let cpath = cstr(lib)?;
    // SAFETY: loading the drop-in runs no code beyond Rust's static initialisers.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror's message, read right after the failed call, before any other.
        let why = unsafe { libc::dlerror() };
        let why = if why.is_null() {
            "no reason given".to_string()
        } else {
            // SAFETY: a NUL-terminated message of the dynamic loader.
            unsafe { std::ffi::CStr::from_ptr(why) }
                .to_string_lossy()
                .into_owned()
        };
        let target = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
        return Err(format!(
            "the drop-in library {} (SOFTROCE_IBVERBS_LIB, or the one found beside softroce) does not load: {why}",
            target.display()
        ));
    }
    // SAFETY: a symbol lookup in the library just loaded.
    let ours = unsafe { libc::dlsym(handle, DROPIN_MARK.as_ptr()) };
    if ours.is_null() {
        let target = std::fs::canonicalize(lib).unwrap_or_else(|_| lib.to_path_buf());
        return Err(format!(
            "{} (SOFTROCE_IBVERBS_LIB, or the one found beside softroce) is not softroce's \
             drop-in libibverbs: it lacks {}",
            target.display(),
            DROPIN_MARK.to_string_lossy()
        ));
    }
    Ok(handle)
}

/// A symbol only softroce's drop-in libibverbs exports (its private node, see exports.txt).
const DROPIN_MARK: &std::ffi::CStr = c"softroce_rdmacm_entry_points";

/// Whether the librdmacm at `lib` is a librdmacm at all (SOFTROCE_RDMACM_LIB may name
/// anything): it loads and has `rdma_create_id`. Else the program would fail in the dynamic
/// loader, naming a link in [`library_dir`] rather than the variable.
fn check_rdmacm(lib: &Path) -> Result<(), String> {
    let cpath = cstr(lib)?;
    // SAFETY: loading a librdmacm runs its static initialisers only (ours: Rust's).
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    // SAFETY: a symbol lookup in the library just loaded.
    let found =
        !handle.is_null() && !unsafe { libc::dlsym(handle, c"rdma_create_id".as_ptr()) }.is_null();
    if !handle.is_null() {
        // SAFETY: our own handle, no symbol of it kept.
        unsafe { libc::dlclose(handle) };
    }
    if found {
        Ok(())
    } else {
        Err(format!(
            "{} (SOFTROCE_RDMACM_LIB, or the one found beside softroce) is not a librdmacm: \
             it does not load or lacks rdma_create_id",
            lib.display()
        ))
    }
}

/// Whether the drop-in at `lib` accepts the devices `SOFTROCE_DEVICES` names: its own
/// `ibv_get_device_list` parses them (the one parser), and says why on stderr when not.
fn devices_accepted(lib: &Path) -> Result<(), String> {
    use std::ffi::c_int;
    let handle = load_dropin(lib)?;
    // SAFETY: symbols of the library just loaded.
    let (get, free) = unsafe {
        (
            libc::dlsym(handle, c"ibv_get_device_list".as_ptr()),
            libc::dlsym(handle, c"ibv_free_device_list".as_ptr()),
        )
    };
    if get.is_null() || free.is_null() {
        return Err(format!("{} has no ibv_get_device_list", lib.display()));
    }
    type GetList = unsafe extern "C" fn(*mut c_int) -> *mut *mut libc::c_void;
    type FreeList = unsafe extern "C" fn(*mut *mut libc::c_void);
    // SAFETY: the signatures of rdma-core's verbs.h.
    let (get, free) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, GetList>(get),
            std::mem::transmute::<*mut libc::c_void, FreeList>(free),
        )
    };
    // SAFETY: a NULL count is allowed; the list is freed by its own library.
    let list = unsafe { get(std::ptr::null_mut()) };
    if list.is_null() {
        return Err(format!(
            "refused ({}; the drop-in said why above)",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the list the call above returned, freed once.
    unsafe { free(list) };
    Ok(())
}

/// The tree of the drop-in at `lib`: its answer for the virtual file `.softroce-tree` of
/// `/sys/class`, so the files say exactly what the library's verbs answer.
fn tree_of(lib: &Path) -> Result<Vec<Node>, String> {
    use std::ffi::{c_char, c_int};
    let handle = load_dropin(lib)?;
    // SAFETY: a symbol of the library just loaded.
    let sym = unsafe { libc::dlsym(handle, c"ibv_read_sysfs_file".as_ptr()) };
    if sym.is_null() {
        return Err(format!("{} has no ibv_read_sysfs_file", lib.display()));
    }
    type ReadSysfs =
        unsafe extern "C" fn(*const c_char, *const c_char, *mut c_char, usize) -> c_int;
    // SAFETY: ibv_read_sysfs_file has this signature (rdma-core's verbs.h).
    let read: ReadSysfs = unsafe { std::mem::transmute::<*mut libc::c_void, ReadSysfs>(sym) };
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: NUL-terminated strings; `buf` holds buf.len() bytes.
    let n = unsafe {
        read(
            c"/sys/class".as_ptr(),
            c".softroce-tree".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| {
        // Most often the devices' configuration (SOFTROCE_CONFIG, SOFTROCE_DEVICES), which
        // the program's own ibv_get_device_list then reports in full.
        format!(
            "the devices could not be listed through {} ({})",
            lib.display(),
            std::io::Error::last_os_error()
        )
    })?;
    parse_tree(&String::from_utf8_lossy(&buf[..n]))
}

fn os_err(what: impl std::fmt::Display) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn cstr(p: &Path) -> Result<std::ffi::CString, String> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: NUL in the path", p.display()))
}

fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: u64,
) -> Result<(), String> {
    let src_c = src.map(cstr).transpose()?;
    let target_c = cstr(target)?;
    let fstype_c = fstype.map(|f| std::ffi::CString::new(f).expect("no NUL"));
    // SAFETY: NUL-terminated strings or NULL; no data argument.
    let rc = unsafe {
        libc::mount(
            src_c.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target_c.as_ptr(),
            fstype_c.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags as libc::c_ulong,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(os_err(format!("mounting on {}", target.display())))
    }
}

/// Enter a private mount namespace: as is when privileged, else inside a new user
/// namespace that maps the caller's ids to themselves (the program keeps its uid).
fn enter_namespace() -> Result<(), String> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare affects only this (single-threaded) process.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        // SAFETY: as above.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
            return Err(os_err("creating a mount namespace (unshare)"));
        }
        // setgroups must be denied before an unprivileged gid_map is written.
        for (file, text) in [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ] {
            if let Err(e) = std::fs::write(file, &text) {
                // Older kernels have no setgroups file.
                if file != "/proc/self/setgroups" {
                    return Err(format!("writing {file}: {e}"));
                }
            }
        }
    }
    // Nothing mounted below may propagate back to the host's namespace.
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE)
}

/// Replace directory `dir` by a tmpfs holding its entries (each bind-mounted from the
/// original, found through an fd kept on it) so that new entries can be made in it
/// without touching the original.
fn shadow_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let orig = std::fs::File::open(dir).map_err(|e| format!("opening {}: {e}", dir.display()))?;
    let mode = orig
        .metadata()
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .permissions()
        .mode()
        & 0o7777;
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("listing {}: {e}", dir.display()))? {
        let e = e.map_err(|e| format!("listing {}: {e}", dir.display()))?;
        let ty = e.file_type().map_err(|e| format!("{}: {e}", e))?;
        let link = if ty.is_symlink() {
            Some(
                std::fs::read_link(e.path())
                    .map_err(|err| format!("{}: {err}", e.path().display()))?,
            )
        } else {
            None
        };
        entries.push((e.file_name(), ty, link));
    }
    mount(
        Some(Path::new("tmpfs")),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID,
    )?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let via = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&orig)
    ));
    for (name, ty, link) in entries {
        let dst = dir.join(&name);
        if let Some(target) = link {
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| format!("{}: {e}", dst.display()))?;
            continue;
        }
        if ty.is_dir() {
            std::fs::create_dir(&dst)
        } else {
            // A device node, socket or file: any file can be a bind mount's target.
            std::fs::File::create(&dst).map(drop)
        }
        .map_err(|e| format!("{}: {e}", dst.display()))?;
        mount(
            Some(&via.join(&name)),
            &dst,
            None,
            libc::MS_BIND | libc::MS_REC,
        )?;
    }
    Ok(())
}

/// Make `dir` an empty writable tmpfs in this namespace: mounted on it when it exists,
/// else created in a shadow of its parent.
fn view_dir(dir: &Path, shadowed: &mut Vec<PathBuf>) -> Result<(), String> {
    if dir.is_dir() {
        return mount(
            Some(Path::new("tmpfs")),
            dir,
            Some("tmpfs"),
            libc::MS_NOSUID,
        );
    }
    let parent = dir.parent().expect("VIEW_DIRS have parents");
    if !shadowed.iter().any(|p| p == parent) {
        shadow_dir(parent)?;
        shadowed.push(parent.to_path_buf());
    }
    std::fs::create_dir(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// Give this process (and the program it becomes) the drop-in's `/dev/infiniband` and
/// sysfs entries, in a private mount namespace.
fn private_view(lib: &Path) -> Result<(), String> {
    enter_namespace()?;
    let tree = tree_of(lib)?;
    let mut shadowed = Vec::new();
    for d in VIEW_DIRS {
        view_dir(Path::new(d), &mut shadowed)?;
    }
    for node in &tree {
        let path = match node {
            Node::File(p, _) | Node::Link(p, _) | Node::CharDevice(p) => p,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        match node {
            Node::File(p, content) => std::fs::write(p, format!("{content}\n"))
                .map_err(|e| format!("{}: {e}", p.display()))?,
            Node::Link(p, target) => std::os::unix::fs::symlink(target, p)
                .map_err(|e| format!("{}: {e}", p.display()))?,
            Node::CharDevice(p) => {
                // A real character device the program may stat and access(R_OK|W_OK); the
                // drop-in never opens it.
                std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?;
                mount(Some(Path::new("/dev/null")), p, None, libc::MS_BIND)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_may_only_name_the_view_directories() {
        let ok = parse_tree(
            "F\t/sys/class/infiniband/d0/node_type\t1: CA\nC\t/dev/infiniband/uverbs0\n\
             L\t/sys/class/infiniband/d0/device/net/lo\t/sys/class/net/lo\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 3);
        assert_eq!(
            ok[0],
            Node::File("/sys/class/infiniband/d0/node_type".into(), "1: CA".into())
        );
        for bad in [
            "F\t/etc/passwd\tx",
            "F\t/sys/class/infiniband/../net/x\ty",
            "F\t/dev/infiniband\tx",
            "X\t/dev/infiniband/a",
        ] {
            assert!(parse_tree(bad).is_err(), "{bad}");
        }
    }
}
