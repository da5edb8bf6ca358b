//! The device list (`ibv_get_device_list` and friends), sysfs look-alikes and the exports
//! that only concern the library itself (fork support, driver registration).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use softroce_emu::Hca;
use softroce_emu::core::{AhAttr, HcaConfig};
use softroce_emu::driver::Device;
use softroce_ibverbs_abi::*;
use softroce_wire::Gid;

use crate::config::{self, DeviceSpec};
use crate::ffi::{fail_loud_null, fail_null, guard, set_errno};
use crate::sysfs;

symver_directives!();

/// One device as applications see it. `dev` is first, so a `*mut ibv_device` handed out is
/// also a pointer to its entry.
#[repr(C)]
pub(crate) struct DeviceEntry {
    pub(crate) dev: ibv_device,
    pub(crate) spec: DeviceSpec,
    pub(crate) index: c_int,
    /// Node GUID in host order.
    pub(crate) node_guid: u64,
    /// The running device while some context of this process has it open: contexts of one
    /// device share it (its UDP socket can be bound once).
    pub(crate) running: Mutex<Weak<Device>>,
}

impl DeviceEntry {
    /// The running device of this entry, started by the first opener.
    pub(crate) fn open(
        &self,
        start: impl FnOnce() -> std::io::Result<Device>,
    ) -> std::io::Result<Arc<Device>> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        // After fork() the parent's running device is only a copy in the child: start one
        // of this process's own (it joins the parent's as a guest, as a second process on
        // a host shares its HCA).
        if let Some(d) = running.upgrade().filter(|d| !d.inherited()) {
            return Ok(d);
        }
        let d = Arc::new(start()?);
        *running = Arc::downgrade(&d);
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain `extern "C" fn()`; it runs at most once, at exit.
            unsafe { libc::atexit(finish_devices_at_exit) };
        });
        Ok(d)
    }
}

/// At exit, the devices still open do what closing them would (counters, capture flush):
/// programs rarely close every device, and librdmacm never closes its own.
extern "C" fn finish_devices_at_exit() {
    // A device busy in another thread is skipped, not waited for.
    guard("atexit", (), finish_devices);
}

fn finish_devices() {
    let Ok(entries) = devices() else { return };
    for &entry in entries {
        // SAFETY: entries are leaked and live for the whole process.
        let entry = unsafe { &*entry };
        let running = entry.running.try_lock().ok().and_then(|r| r.upgrade());
        if let Some(device) = running.filter(|d| !d.inherited()) {
            device.finish_at_exit();
        }
    }
}

/// The entries, leaked: applications keep `ibv_device` pointers for as long as they like.
struct Devices(Vec<*mut DeviceEntry>);
// SAFETY: the entries are written once before being published and only read afterwards.
unsafe impl Sync for Devices {}
// SAFETY: as above.
unsafe impl Send for Devices {}

static DEVICES: OnceLock<Result<Devices, String>> = OnceLock::new();

fn devices() -> Result<&'static [*mut DeviceEntry], &'static str> {
    let d = DEVICES.get_or_init(|| {
        let specs = config::from_env()?;
        let list = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                // SAFETY: ibv_device is plain data for which all-zero bytes are valid.
                let mut dev: ibv_device = unsafe { std::mem::zeroed() };
                dev.node_type = IBV_NODE_CA;
                dev.transport_type = IBV_TRANSPORT_IB;
                convert::copy_cstr(&mut dev.name, &spec.name);
                convert::copy_cstr(&mut dev.dev_name, &format!("uverbs{i}"));
                convert::copy_cstr(
                    &mut dev.dev_path,
                    &format!("/sys/class/infiniband_verbs/uverbs{i}"),
                );
                convert::copy_cstr(
                    &mut dev.ibdev_path,
                    &format!("/sys/class/infiniband/{}", spec.name),
                );
                let node_guid = Hca::new(HcaConfig::new(spec.name.clone(), spec.ip))
                    .query_device()
                    .node_guid;
                Box::into_raw(Box::new(DeviceEntry {
                    dev,
                    spec,
                    index: i as c_int,
                    node_guid,
                    running: Mutex::new(Weak::new()),
                }))
            })
            .collect();
        Ok(Devices(list))
    });
    match d {
        Ok(d) => Ok(&d.0),
        Err(e) => Err(e.as_str()),
    }
}

/// `fork()`: each device entry's start (see [`crate::fork`]); none before the device list
/// is made.
pub(crate) fn hold_for_fork(held: &mut crate::fork::Held) {
    let Some(Ok(list)) = DEVICES.get() else {
        return;
    };
    for &e in &list.0 {
        // SAFETY: entries are leaked and never freed.
        let entry = unsafe { &*e };
        crate::fork::take(&entry.running, held);
    }
}

/// The configured devices, in order (None when the configuration is wrong).
pub(crate) fn entries() -> Option<Vec<&'static DeviceEntry>> {
    let list = devices().ok()?;
    // SAFETY: entries are leaked and never freed.
    Some(list.iter().map(|&e| unsafe { &*e }).collect())
}

/// The entry behind a device pointer from our list, or None.
pub(crate) fn entry(device: *mut ibv_device) -> Option<&'static DeviceEntry> {
    let list = devices().ok()?;
    list.iter()
        .find(|&&e| e.cast::<ibv_device>() == device)
        // SAFETY: entries are leaked and never freed.
        .map(|&e| unsafe { &*e })
}

/// The core's address vector of a C one, with the UDP port of the configured device that has
/// the destination's address: lets address vectors reach devices that share an address on
/// different ports when every process lists all of them.
pub(crate) fn address_vector(a: &ibv_ah_attr) -> AhAttr {
    let mut av = convert::ah_attr_from_c(a);
    if av.dgid != Gid::ZERO {
        av.udp_port = udp_port_for(av.dgid.to_ip()).unwrap_or(0);
    }
    av
}

pub(crate) fn udp_port_for(ip: IpAddr) -> Option<u16> {
    let list = devices().ok()?;
    list.iter()
        // SAFETY: entries are leaked and never freed.
        .map(|&e| unsafe { &*e })
        .find(|e| e.spec.ip == ip)
        .map(|e| e.spec.udp_port)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", std::ptr::null_mut(), || {
        // Read here, where every program starts: a misspelt SOFTROCE_LOG is said before a
        // quiet run is taken for a clean one.
        crate::ffi::log_verbs();
        if !num_devices.is_null() {
            // SAFETY: the caller passes a valid int pointer or NULL.
            unsafe { *num_devices = 0 };
        }
        let list = match devices() {
            Ok(l) => l,
            Err(e) => return fail_loud_null("ibv_get_device_list", libc::EINVAL, e),
        };
        // SAFETY: calloc of n+1 pointers; NULL-terminated like rdma-core's list.
        let arr = unsafe { libc::calloc(list.len() + 1, size_of::<*mut ibv_device>()) }
            .cast::<*mut ibv_device>();
        if arr.is_null() {
            return fail_null("ibv_get_device_list", libc::ENOMEM, "out of memory");
        }
        for (i, &e) in list.iter().enumerate() {
            // SAFETY: `arr` holds list.len() + 1 slots.
            unsafe { *arr.add(i) = e.cast() };
        }
        if !num_devices.is_null() {
            // SAFETY: as above.
            unsafe { *num_devices = list.len() as c_int };
        }
        arr
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    guard("ibv_free_device_list", (), || {
        // SAFETY: the list came from calloc in ibv_get_device_list (or is NULL).
        unsafe { libc::free(list.cast()) }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    guard("ibv_get_device_name", std::ptr::null(), || {
        match entry(device) {
            Some(e) => e.dev.name.as_ptr(),
            None => {
                set_errno(libc::EINVAL);
                std::ptr::null()
            }
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> __be64 {
    guard("ibv_get_device_guid", 0, || match entry(device) {
        Some(e) => e.node_guid.to_be(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    guard("ibv_get_device_index", -1, || match entry(device) {
        Some(e) => e.index,
        None => -1,
    })
}

/// Contents of the sysfs files of our (sysfs-less) devices, and the whole tree for
/// `softroce exec` ([`sysfs::TREE_FILE`] of `/sys/class`). None: not one of ours.
fn virtual_sysfs_file(dir: &str, file: &str) -> Option<Result<String, c_int>> {
    let list = devices().ok()?;
    // SAFETY: entries are leaked and never freed.
    let entries: Vec<&DeviceEntry> = list.iter().map(|&e| unsafe { &*e }).collect();
    let dir = dir.trim_end_matches('/');
    if dir == "/sys/class" && file == sysfs::TREE_FILE {
        return Some(Ok(sysfs::tree_text(&entries)));
    }
    let e = entries.into_iter().find(|e| {
        let ibdev = format!("/sys/class/infiniband/{}", e.spec.name);
        let verbs = format!("/sys/class/infiniband_verbs/uverbs{}", e.index);
        [ibdev, verbs].iter().any(|d| {
            dir == d
                || dir
                    .strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    })?;
    Some(sysfs::file_of(e, &format!("{dir}/{file}")).ok_or(libc::ENOENT))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard("ibv_read_sysfs_file", -1, || {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings from the caller.
        let (dir, file) = unsafe {
            (
                CStr::from_ptr(dir).to_string_lossy().into_owned(),
                CStr::from_ptr(file).to_string_lossy().into_owned(),
            )
        };
        // At most `size` bytes, in one read as rdma-core's ibv_read_sysfs_file_at: a
        // file that never ends (/dev/zero) or is huge costs no more than the buffer.
        let len = match virtual_sysfs_file(&dir, &file) {
            Some(Ok(s)) => {
                let n = s.len().min(size);
                // SAFETY: `buf` holds `size` bytes.
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n) };
                n
            }
            Some(Err(e)) => {
                set_errno(e);
                return -1;
            }
            None => {
                let Ok(path) = std::ffi::CString::new(format!("{dir}/{file}")) else {
                    set_errno(libc::EINVAL);
                    return -1;
                };
                // SAFETY: a NUL-terminated path; `buf` holds `size` bytes.
                let n = unsafe {
                    let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return -1;
                    }
                    let n = libc::read(fd, buf.cast(), size);
                    let read_errno = *libc::__errno_location();
                    libc::close(fd);
                    set_errno(read_errno);
                    n
                };
                if n < 0 {
                    return -1;
                }
                n as usize
            }
        };
        if len == 0 {
            return 0;
        }
        let buf = buf.cast::<u8>();
        // SAFETY: `buf` holds `size` bytes, the first `len` (<= size) of them read.
        if unsafe { *buf.add(len - 1) } == b'\n' {
            // SAFETY: as above.
            unsafe { *buf.add(len - 1) = 0 };
            (len - 1) as c_int
        } else if len < size {
            // SAFETY: as above, and len < size.
            unsafe { *buf.add(len) = 0 };
            len as c_int
        } else {
            // Only a truncated string would fit: refused, as rdma-core refuses it.
            set_errno(libc::EOVERFLOW);
            -1
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    guard("ibv_get_sysfs_path", std::ptr::null(), || c"/sys".as_ptr())
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_fork_init() -> c_int {
    // Nothing to protect: the emulator reads and writes memory by address, never by DMA
    // mappings a fork could copy-on-write away.
    guard("ibv_fork_init", 0, || 0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_is_fork_initialized() -> u32 {
    guard("ibv_is_fork_initialized", IBV_FORK_UNNEEDED, || {
        IBV_FORK_UNNEEDED
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    guard("ibv_dontfork_range", 0, || 0)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    guard("ibv_dofork_range", 0, || 0)
}

/// libmlx5's and libefa's constructors register their providers here when perftest loads
/// them; there is nothing to register with.
#[unsafe(no_mangle)]
unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {
    guard("verbs_register_driver_34", (), || {});
}

/// rdma-core's `bool verbs_allow_disassociate_destroy` (imported by providers).
#[unsafe(no_mangle)]
static mut verbs_allow_disassociate_destroy: bool = false;
