//! The C boundary: panics stop here, errno is set here, failures are reported here.
//!
//! Every `extern "C" fn` of the crate (exports and the entry points it installs in C
//! structs) consists of one call to [`guard`], or to a function that itself consists of one
//! such call (the `guard_*` forms below, …); the test at the end of this file checks the
//! source for it.

use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Run `f`, turning a panic into `on_panic` (after saying so on stderr) so that it never
/// unwinds into C code.
pub(crate) fn guard<T>(verb: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(e) => {
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            eprintln!("softroce: {verb}: internal error ({msg}); returning an error to the caller");
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// A verb returning 0 or an errno value (errno set as well).
pub(crate) fn guard_errno(verb: &str, f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(verb, libc::EIO, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    })
}

/// A verb returning 0, or -1 with errno set: those whose man page says "0 on success, and
/// -1 on error" (`ibv_get_cq_event`, `ibv_get_async_event`, `ibv_query_gid`,
/// `ibv_query_pkey`, `ibv_init_ah_from_wc`). The others return the errno value.
pub(crate) fn guard_status(verb: &str, f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    guard(verb, -1, || match f() {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// A verb returning a pointer: NULL with errno set on failure.
pub(crate) fn guard_ptr<T>(verb: &str, f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guard(verb, std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// The calling thread's errno.
pub(crate) fn errno() -> c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Set the calling thread's errno.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Report a failed verb: errno set, the errno returned, and — only with `SOFTROCE_LOG=verbs`
/// — one line on stderr saying which check failed. Quiet by default like rdma-core:
/// libraries probe limits by retrying a verb with smaller values (UCX's `max_inline_data`),
/// and a line per probe would bury the program's own output.
pub(crate) fn fail(verb: &str, errno: i32, why: impl std::fmt::Display) -> i32 {
    if log_verbs() {
        say(verb, why);
    }
    set_errno(errno);
    errno
}

/// One line on stderr: `softroce: VERB: WHY`, WHY cut at [`MOST_SAID`] bytes (a reason can
/// quote input, and input can be a megabyte-long line of a configuration file).
fn say(verb: &str, why: impl std::fmt::Display) {
    let why = why.to_string();
    if why.len() <= MOST_SAID {
        eprintln!("softroce: {verb}: {why}");
    } else {
        let mut end = MOST_SAID;
        while !why.is_char_boundary(end) {
            end -= 1;
        }
        eprintln!(
            "softroce: {verb}: {}… ({} more bytes)",
            &why[..end],
            why.len() - end
        );
    }
}

/// The most of a reason [`say`] prints.
const MOST_SAID: usize = 1000;

/// Whether `SOFTROCE_LOG` (a comma-separated list) names `verbs`; read once.
pub(crate) fn log_verbs() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let Some(value) = std::env::var_os("SOFTROCE_LOG") else {
            return false;
        };
        let value = value.to_string_lossy();
        let words: Vec<&str> = value.split(',').map(str::trim).collect();
        // A typo (`verb`, `debug`) must not pass for a quiet run: said once.
        let unknown: Vec<&str> = words
            .iter()
            .copied()
            .filter(|w| !w.is_empty() && !w.eq_ignore_ascii_case("verbs"))
            .collect();
        if !unknown.is_empty() {
            eprintln!(
                "softroce: SOFTROCE_LOG names {:?}: not a log this library keeps (only \"verbs\"); ignored",
                unknown.join(",").chars().take(80).collect::<String>()
            );
        }
        words.iter().any(|w| w.eq_ignore_ascii_case("verbs"))
    })
}

/// A failure the user must hear about whatever `SOFTROCE_LOG` says (a broken device
/// configuration: every verb after it fails): errno set, a line on stderr, NULL returned.
/// A failed verb the user must hear about whatever `SOFTROCE_LOG` says (the environment or
/// configuration is wrong, not the call): the reason on stderr, errno set, errno returned.
pub(crate) fn fail_loud(verb: &str, errno: i32, why: impl std::fmt::Display) -> i32 {
    say(verb, why);
    set_errno(errno);
    errno
}

pub(crate) fn fail_loud_null<T>(verb: &str, errno: i32, why: impl std::fmt::Display) -> *mut T {
    say(verb, why);
    set_errno(errno);
    std::ptr::null_mut()
}

/// A failed verb that returns a pointer: NULL with errno set.
pub(crate) fn fail_null<T>(verb: &str, errno: i32, why: impl std::fmt::Display) -> *mut T {
    fail(verb, errno, why);
    std::ptr::null_mut()
}

/// An all-zero C struct.
pub(crate) fn zeroed<T: Copy>() -> T {
    // SAFETY: only used for the plain-data verbs structs (integers, raw pointers, optional
    // function pointers and unions of those), for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    /// The crate's sources, as (file name, text).
    fn sources() -> Vec<(String, String)> {
        let root = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
        let mut dirs = vec![root.clone()];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("reading src/") {
                let p = entry.expect("a directory entry").path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).expect("reading a source file");
                    let name = p
                        .strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    files.push((name, text));
                }
            }
        }
        files.sort();
        files
    }

    /// The index just past the bracket matching the one at `open`, skipping string and
    /// character literals and line comments.
    fn past_match(text: &str, open: usize) -> usize {
        let b = text.as_bytes();
        let (o, c) = (b[open], if b[open] == b'{' { b'}' } else { b')' });
        let (mut depth, mut i) = (0usize, open);
        while i < b.len() {
            match b[i] {
                b'"' => {
                    i += 1;
                    while b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'\'' if b.get(i + 1) == Some(&b'\\') => {
                    i += 3;
                    while b[i] != b'\'' {
                        i += 1;
                    }
                }
                b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
                b'/' if b[i + 1] == b'/' => {
                    while b[i] != b'\n' {
                        i += 1;
                    }
                }
                x if x == o => depth += 1,
                x if x == c => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        panic!("unbalanced brackets");
    }

    /// A function definition: its name, whether it is `extern "C"`, and the function its
    /// body is one call of (ignoring comments and `const` items), if it is one.
    struct Function {
        file: String,
        name: String,
        extern_c: bool,
        single_call: Option<String>,
    }

    fn functions() -> Vec<Function> {
        let mut out = Vec::new();
        for (file, text) in sources() {
            let mut at = 0;
            while let Some(found) = text[at..].find("fn ") {
                let start = at + found;
                at = start + 3;
                let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
                let before = &text[line_start..start];
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '$')
                    .collect();
                let word_start = start == 0 || !text.as_bytes()[start - 1].is_ascii_alphanumeric();
                if name.is_empty() || !word_start || before.trim_start().starts_with("//") {
                    continue;
                }
                let Some(params) = text[at..].find('(').map(|p| at + p) else {
                    continue;
                };
                let after = past_match(&text, params);
                let Some(stop) = text[after..].find(['{', ';']).map(|p| after + p) else {
                    continue;
                };
                if text.as_bytes()[stop] == b';' {
                    continue;
                }
                let end = past_match(&text, stop);
                let body: String = text[stop + 1..end - 1]
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.starts_with("//") && !l.starts_with("const "))
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push(Function {
                    file: file.clone(),
                    name,
                    extern_c: before.contains("extern \"C\""),
                    single_call: single_call(&body),
                });
            }
        }
        out
    }

    /// `f` when `body` is exactly `f(…)` or `f::<…>(…)`, with an optional `;`.
    fn single_call(body: &str) -> Option<String> {
        let body = body.trim();
        let callee: String = body
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let open = body.find('(')?;
        let between = &body[callee.len()..open];
        if callee.is_empty() || !(between.is_empty() || between.starts_with("::<")) {
            return None;
        }
        matches!(body[past_match(body, open)..].trim(), "" | ";").then_some(callee)
    }

    /// Every `extern "C" fn` body is one call of `guard`, or of a function whose body is one
    /// such call: nothing runs outside the panic guard, not even reading an argument.
    #[test]
    fn every_c_entry_point_runs_inside_the_panic_guard() {
        let fns = functions();
        let mut bodies: HashMap<&str, Vec<Option<&str>>> = HashMap::new();
        for f in &fns {
            bodies
                .entry(f.name.as_str())
                .or_default()
                .push(f.single_call.as_deref());
        }
        let mut guarding: HashSet<&str> = HashSet::from(["guard"]);
        loop {
            let more: Vec<&str> = bodies
                .iter()
                .filter(|(name, calls)| {
                    !guarding.contains(*name)
                        && calls
                            .iter()
                            .all(|c| c.is_some_and(|callee| guarding.contains(callee)))
                })
                .map(|(name, _)| *name)
                .collect();
            if more.is_empty() {
                break;
            }
            guarding.extend(more);
        }
        let entry_points: Vec<&Function> = fns.iter().filter(|f| f.extern_c).collect();
        let unguarded: Vec<String> = entry_points
            .iter()
            .filter(|f| {
                !f.single_call
                    .as_deref()
                    .is_some_and(|c| guarding.contains(c))
            })
            .map(|f| format!("{}: {}", f.file, f.name))
            .collect();
        assert!(
            entry_points.len() > 100,
            "found only {} C entry points",
            entry_points.len()
        );
        assert!(unguarded.is_empty(), "not inside the guard: {unguarded:#?}");
    }
}
