//! `softroce exec`: run an unmodified libibverbs program on the emulator, by putting the
//! drop-in `libibverbs.so.1` (crate softroce-ibverbs) first on `LD_LIBRARY_PATH`.

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
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// The drop-in library: `SOFTROCE_IBVERBS_LIB`, else `libibverbs.so` next to this binary
/// (cargo puts both in `target/<profile>/`).
fn find_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SOFTROCE_IBVERBS_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!(
                "SOFTROCE_IBVERBS_LIB={} is not a file",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating this binary: {e}"))?;
    let dir = exe.parent().unwrap_or_else(|| Path::new("."));
    for candidate in [dir.join("libibverbs.so"), dir.join("libibverbs.so.1")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "no libibverbs.so next to {}: build it with `cargo build -p softroce-ibverbs` (same \
         profile as softroce) or set SOFTROCE_IBVERBS_LIB",
        exe.display()
    ))
}

/// A directory holding `libibverbs.so.1` → `lib`, one per library path and user, reused
/// across runs (exec leaves no chance to clean up afterwards).
fn library_dir(lib: &Path) -> Result<PathBuf, String> {
    let lib = lib
        .canonicalize()
        .map_err(|e| format!("{}: {e}", lib.display()))?;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in lib.as_os_str().as_encoded_bytes() {
        hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let dir = std::env::temp_dir().join(format!("softroce-ibverbs-{uid}-{hash:016x}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let link = dir.join("libibverbs.so.1");
    if std::fs::read_link(&link).ok().as_deref() != Some(lib.as_path()) {
        // Replace atomically so concurrent runs never see a missing link.
        let tmp = dir.join(format!("libibverbs.so.1.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&lib, &tmp)
            .and_then(|()| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("linking {} to {}: {e}", link.display(), lib.display()))?;
    }
    Ok(dir)
}

pub(crate) fn run(args: &ExecArgs) -> ExitCode {
    let dir = match find_library().and_then(|lib| library_dir(&lib)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("softroce exec: {e}");
            return ExitCode::from(127);
        }
    };
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
    if let Some(spec) = &args.devices {
        cmd.env("SOFTROCE_DEVICES", spec);
    }
    // Only returns on failure.
    let err = cmd.exec();
    eprintln!(
        "softroce exec: running {}: {err}",
        Path::new(program).display()
    );
    ExitCode::from(127)
}
