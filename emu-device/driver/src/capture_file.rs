//! Capture files (`SOFTROCE_PCAP`): one writer per file in a process, and a file written by
//! one process only. Devices of one process that name the same file share its writer, so
//! their records interleave whole; a second process that names a file another is writing
//! (a CI job that starts a server and a client with one `SOFTROCE_PCAP`) captures into a
//! file of its own, `NAME.PID.EXT` beside it, and says so: two writers of one file left a
//! capture that no reader could follow past the first overlap.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use softroce_wire::pcap::CaptureWriter;

/// A capture, shared by the devices of this process that write it; `None` once closed
/// (at exit the first device to finish flushes and closes it).
pub(crate) type SharedCapture = Arc<Mutex<Option<Writer>>>;

type Writer = CaptureWriter<BufWriter<File>>;

/// An open capture: the process that opened it, its absolute path, its writer.
type OpenCapture = (u32, PathBuf, Weak<Mutex<Option<Writer>>>);

/// The capture for `path`: the one this process already writes there, or a new one.
pub(crate) fn open(path: &Path) -> io::Result<SharedCapture> {
    /// The captures open; a child forked since does not share its parent's writer (their
    /// buffers would interleave unaligned).
    static OPEN: Mutex<Vec<OpenCapture>> = Mutex::new(Vec::new());
    let named = |e: io::Error, p: &Path| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let key = std::path::absolute(path).map_err(|e| named(e, path))?;
    let pid = std::process::id();
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, _, w)| w.strong_count() > 0);
    if let Some(shared) = open
        .iter()
        .filter(|(p, k, _)| *p == pid && *k == key)
        .find_map(|(_, _, w)| w.upgrade())
    {
        return Ok(shared);
    }
    let (file, used) = match claim(&key).map_err(|e| named(e, &key))? {
        Some(file) => (file, key.clone()),
        None => {
            let own = beside(&key, pid);
            let file = claim(&own).map_err(|e| named(e, &own))?.ok_or_else(|| {
                io::Error::other(format!("{}: another process writes it too", own.display()))
            })?;
            eprintln!(
                "softroce: {} is being written by another process; this one captures into {}",
                key.display(),
                own.display()
            );
            (file, own)
        }
    };
    let writer = CaptureWriter::new(BufWriter::new(file), used.display().to_string())
        .map_err(|e| io::Error::other(e.to_string()))?;
    let shared = Arc::new(Mutex::new(Some(writer)));
    open.push((pid, key, Arc::downgrade(&shared)));
    Ok(shared)
}

/// Opens `path` for writing: a regular file is taken only when no other process holds its
/// lock (`None` then), and emptied once taken; a device file (/dev/null) is written as it
/// is. A FIFO is refused: opening one waits for a reader, which may be never.
fn claim(path: &Path) -> io::Result<Option<File>> {
    use std::os::unix::fs::FileTypeExt as _;
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a FIFO (opening it would wait for a reader)",
        ));
    }
    // Not truncated before the lock is ours: that would cut the other writer's capture.
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(Some(file));
    }
    // SAFETY: flock on an open descriptor; released when the file closes.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    file.set_len(0)?;
    Ok(Some(file))
}

/// `dir/NAME.PID.EXT` for `dir/NAME.EXT` (`NAME.PID` without an extension).
fn beside(path: &Path, pid: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_name_goes_beside_the_first_with_the_process_id() {
        assert_eq!(
            beside(Path::new("/tmp/x/rdma.pcap"), 42),
            PathBuf::from("/tmp/x/rdma.42.pcap")
        );
        assert_eq!(beside(Path::new("cap"), 7), PathBuf::from("cap.7"));
    }

    #[test]
    fn devices_of_one_process_share_the_writer_of_one_file() {
        let dir = std::env::temp_dir().join(format!("softroce-capfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("one.pcap");
        let a = open(&path).unwrap();
        let b = open(&dir.join(".").join("one.pcap")).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one writer for one file");
        // Another holder of the lock (as another process would be): a new open goes beside.
        drop((a, b));
        let other = OpenOptions::new().write(true).open(&path).unwrap();
        // SAFETY: flock on an open descriptor.
        assert_eq!(
            unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let _c = open(&path).unwrap();
        assert!(
            beside(&path, std::process::id()).exists(),
            "captured beside"
        );
        drop(other);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
