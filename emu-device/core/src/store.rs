//! The object store: owns the PDs, MRs (with their key index), MWs (with theirs), AHs, SRQs and QPs (with the
//! QPN index and the next QPN to hand out), and answers typed lookups by handle.

use foldhash::HashMap;

use softroce_wire::Qpn;

use super::error::VerbsResult;
use super::handles::{
    AhHandle, DmHandle, Handle, MrHandle, MwHandle, PdHandle, QpHandle, SrqHandle, Table,
    XrcdHandle,
};
use super::objects::{Ah, Dm, Mr, Mw, Pd, Qp, Srq, Xrcd};
use super::types::MwType;

/// A handle whose objects live in the [`Store`].
pub(crate) trait Stored: Handle {
    type Object: 'static;
    fn table(store: &Store) -> &Table<Self, Self::Object>;
    fn table_mut(store: &mut Store) -> &mut Table<Self, Self::Object>;
}

macro_rules! stored {
    ($handle:ty, $object:ty, $field:ident) => {
        impl Stored for $handle {
            type Object = $object;
            fn table(store: &Store) -> &Table<Self, $object> {
                &store.$field
            }
            fn table_mut(store: &mut Store) -> &mut Table<Self, $object> {
                &mut store.$field
            }
        }
    };
}

stored!(PdHandle, Pd, pds);
stored!(MrHandle, Mr, mrs);
stored!(MwHandle, Mw, mws);
stored!(DmHandle, Dm, dms);
stored!(AhHandle, Ah, ahs);
stored!(SrqHandle, Srq, srqs);
stored!(QpHandle, Qp, qps);
stored!(XrcdHandle, Xrcd, xrcds);

/// Every object but CQs and channels (those are the completion machinery's).
#[derive(Debug)]
pub(crate) struct Store {
    pds: Table<PdHandle, Pd>,
    mrs: Table<MrHandle, Mr>,
    mr_by_key: HashMap<u32, MrHandle>,
    mws: Table<MwHandle, Mw>,
    /// A window keeps its key index (R_Key >> 8) for life; binds change the low byte.
    mw_by_index: HashMap<u32, MwHandle>,
    dms: Table<DmHandle, Dm>,
    ahs: Table<AhHandle, Ah>,
    srqs: Table<SrqHandle, Srq>,
    srq_by_num: HashMap<u32, SrqHandle>,
    next_srqn: u32,
    xrcds: Table<XrcdHandle, Xrcd>,
    qps: Table<QpHandle, Qp>,
    qp_by_qpn: HashMap<u32, QpHandle>,
    next_qpn: u32,
    /// The QPNs this store hands out.
    qpn_range: std::ops::Range<u32>,
}

impl Store {
    pub(crate) fn new(first_qpn: u32, qpn_range: std::ops::Range<u32>) -> Self {
        Self {
            pds: Table::default(),
            mrs: Table::default(),
            mr_by_key: HashMap::default(),
            mws: Table::default(),
            mw_by_index: HashMap::default(),
            dms: Table::default(),
            ahs: Table::default(),
            srqs: Table::default(),
            srq_by_num: HashMap::default(),
            next_srqn: 1,
            xrcds: Table::default(),
            qps: Table::default(),
            qp_by_qpn: HashMap::default(),
            next_qpn: first_qpn.clamp(qpn_range.start, qpn_range.end - 1),
            qpn_range,
        }
    }

    /// The object `h` names, if it still exists.
    pub(crate) fn get<H: Stored>(&self, h: H) -> Option<&H::Object> {
        H::table(self).get(h)
    }

    pub(crate) fn get_mut<H: Stored>(&mut self, h: H) -> Option<&mut H::Object> {
        H::table_mut(self).get_mut(h)
    }

    /// The object `h` names, or the stale-handle error `verb` reports.
    pub(crate) fn lookup<H: Stored>(&self, verb: &'static str, h: H) -> VerbsResult<&H::Object> {
        H::table(self).lookup(verb, h)
    }

    pub(crate) fn lookup_mut<H: Stored>(
        &mut self,
        verb: &'static str,
        h: H,
    ) -> VerbsResult<&mut H::Object> {
        H::table_mut(self).lookup_mut(verb, h)
    }

    /// How many objects of this kind exist.
    pub(crate) fn count<H: Stored>(&self) -> usize {
        H::table(self).len()
    }

    pub(crate) fn insert_pd(&mut self) -> PdHandle {
        self.pds.insert(Pd::default())
    }

    pub(crate) fn remove_pd(&mut self, verb: &'static str, pd: PdHandle) -> VerbsResult<Pd> {
        self.pds.remove(verb, pd)
    }

    /// Count one more (`delta` 1) or one fewer (-1) object using the PD.
    pub(crate) fn add_pd_users(
        &mut self,
        verb: &'static str,
        pd: PdHandle,
        delta: i32,
    ) -> VerbsResult<()> {
        let p = self.pds.lookup_mut(verb, pd)?;
        p.users = p.users.saturating_add_signed(delta);
        Ok(())
    }

    /// Whether a new region may not take `key`: a region has it, or a window its index.
    pub(crate) fn key_in_use(&self, key: u32) -> bool {
        self.mr_by_key.contains_key(&key) || self.mw_by_index.contains_key(&(key >> 8))
    }

    /// Whether a new window may not take `key`'s index (any key byte): so that an R_Key
    /// names a region or a window, never both, whatever byte later binds pick.
    pub(crate) fn key_index_in_use(&self, key: u32) -> bool {
        let index = key >> 8;
        self.mw_by_index.contains_key(&index)
            || (0..=0xFF).any(|b| self.mr_by_key.contains_key(&(index << 8 | b)))
    }

    pub(crate) fn insert_mw(&mut self, mw: Mw) -> MwHandle {
        let index = mw.rkey >> 8;
        let handle = self.mws.insert(mw);
        self.mw_by_index.insert(index, handle);
        handle
    }

    pub(crate) fn remove_mw(&mut self, verb: &'static str, mw: MwHandle) -> VerbsResult<Mw> {
        let w = self.mws.remove(verb, mw)?;
        self.mw_by_index.remove(&(w.rkey >> 8));
        Ok(w)
    }

    /// The window an R_Key names (index and key byte), if any.
    pub(crate) fn mw_by_rkey(&self, rkey: u32) -> Option<(MwHandle, &Mw)> {
        let h = *self.mw_by_index.get(&(rkey >> 8))?;
        self.mws.get(h).filter(|w| w.rkey == rkey).map(|w| (h, w))
    }

    /// Count a window bound to (1) or unbound from (-1) the region, if it still exists.
    pub(crate) fn add_mr_windows(&mut self, mr: MrHandle, delta: i32) {
        if let Some(m) = self.mrs.get_mut(mr) {
            m.windows = m.windows.saturating_add_signed(delta);
        }
    }

    /// Unbind window `mw` (LOCAL_INV, SEND_WITH_INV, a zero-length bind, dealloc).
    pub(crate) fn unbind_mw(&mut self, mw: MwHandle) {
        let binding = self.mws.get_mut(mw).and_then(|w| w.binding.take());
        if let Some(b) = binding {
            self.add_mr_windows(b.mr, -1);
        }
    }

    /// Invalidate the type-2 window `rkey` names, bound and of `pd` (IBV_WR_LOCAL_INV, or
    /// a SEND_WITH_INV arriving on `via`, which must be the QP it was bound on); `false`
    /// (nothing changed) otherwise: type 1 windows are invalidated by a zero-length bind
    /// only (ibv_alloc_mw(3)).
    pub(crate) fn invalidate_mw(&mut self, pd: PdHandle, rkey: u32, via: Option<QpHandle>) -> bool {
        let ok = self.mw_by_rkey(rkey).filter(|(_, w)| {
            w.pd == pd
                && w.mw_type == MwType::Type2
                && w.binding.is_some_and(|b| via.is_none() || b.qp == via)
        });
        let Some((h, _)) = ok else {
            return false;
        };
        self.unbind_mw(h);
        true
    }

    /// Store a region under its key (lkey and rkey are the same).
    pub(crate) fn insert_dm(&mut self, dm: Dm) -> DmHandle {
        self.dms.insert(dm)
    }

    pub(crate) fn remove_dm(&mut self, verb: &'static str, dm: DmHandle) -> VerbsResult<Dm> {
        self.dms.remove(verb, dm)
    }

    /// Bytes of device memory allocated.
    pub(crate) fn dm_in_use(&self) -> u64 {
        self.dms.iter().map(|d| d.len).sum()
    }

    pub(crate) fn insert_mr(&mut self, mr: Mr) -> MrHandle {
        let key = mr.lkey;
        let handle = self.mrs.insert(mr);
        self.mr_by_key.insert(key, handle);
        handle
    }

    pub(crate) fn remove_mr(&mut self, verb: &'static str, mr: MrHandle) -> VerbsResult<Mr> {
        let m = self.mrs.remove(verb, mr)?;
        self.mr_by_key.remove(&m.lkey);
        Ok(m)
    }

    /// The region a key names, if any.
    pub(crate) fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        self.mrs.get(*self.mr_by_key.get(&key)?)
    }

    /// Invalidate the window or region with this rkey (SEND_WITH_INV arriving on `qp`) if
    /// it belongs to `pd` and may be invalidated remotely; `false` (nothing changed)
    /// otherwise.
    pub(crate) fn invalidate_rkey(&mut self, pd: PdHandle, rkey: u32, qp: QpHandle) -> bool {
        let Some(&h) = self.mr_by_key.get(&rkey) else {
            return self.invalidate_mw(pd, rkey, Some(qp));
        };
        match self.mrs.get_mut(h) {
            Some(mr) if mr.pd == pd && mr.rkey == rkey && mr.remotely_invalidatable() => {
                mr.remote_valid = false;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn insert_ah(&mut self, ah: Ah) -> AhHandle {
        self.ahs.insert(ah)
    }

    pub(crate) fn remove_ah(&mut self, verb: &'static str, ah: AhHandle) -> VerbsResult<Ah> {
        self.ahs.remove(verb, ah)
    }

    /// Store an SRQ under a fresh SRQ number (24 bits, never 0, skipping numbers in use),
    /// or `None` when every number is taken.
    pub(crate) fn insert_srq(&mut self, mut srq: Srq) -> Option<SrqHandle> {
        const SRQN_MAX: u32 = 0x00FF_FFFF;
        let mut srqn = None;
        for _ in 0..SRQN_MAX {
            let n = self.next_srqn;
            self.next_srqn = if n >= SRQN_MAX { 1 } else { n + 1 };
            if !self.srq_by_num.contains_key(&n) {
                srqn = Some(n);
                break;
            }
        }
        srq.srqn = srqn?;
        let n = srq.srqn;
        let handle = self.srqs.insert(srq);
        self.srq_by_num.insert(n, handle);
        Some(handle)
    }

    pub(crate) fn remove_srq(&mut self, verb: &'static str, srq: SrqHandle) -> VerbsResult<Srq> {
        let s = self.srqs.remove(verb, srq)?;
        self.srq_by_num.remove(&s.srqn);
        Ok(s)
    }

    /// The SRQ with this number (an XRCETH's), if any.
    pub(crate) fn srq_by_number(&self, srqn: u32) -> Option<SrqHandle> {
        self.srq_by_num.get(&srqn).copied()
    }

    pub(crate) fn insert_xrcd(&mut self) -> XrcdHandle {
        self.xrcds.insert(Xrcd::default())
    }

    pub(crate) fn remove_xrcd(&mut self, verb: &'static str, x: XrcdHandle) -> VerbsResult<Xrcd> {
        self.xrcds.remove(verb, x)
    }

    pub(crate) fn add_xrcd_users(
        &mut self,
        verb: &'static str,
        x: XrcdHandle,
        delta: i32,
    ) -> VerbsResult<()> {
        let d = self.xrcds.lookup_mut(verb, x)?;
        d.users = d.users.saturating_add_signed(delta);
        Ok(())
    }

    /// Store a QP under its number.
    pub(crate) fn insert_qp(&mut self, qp: Qp) -> QpHandle {
        let qpn = qp.qpn.value();
        let handle = self.qps.insert(qp);
        self.qp_by_qpn.insert(qpn, handle);
        handle
    }

    pub(crate) fn remove_qp(&mut self, verb: &'static str, qp: QpHandle) -> VerbsResult<Qp> {
        let q = self.qps.remove(verb, qp)?;
        self.qp_by_qpn.remove(&q.qpn.value());
        Ok(q)
    }

    /// The QP with this number, if any.
    pub(crate) fn qp_by_number(&self, qpn: Qpn) -> Option<QpHandle> {
        self.qp_by_qpn.get(&qpn.value()).copied()
    }

    /// Every QP, in the QPN index's order.
    pub(crate) fn qp_handles(&self) -> impl Iterator<Item = QpHandle> + '_ {
        self.qp_by_qpn.values().copied()
    }

    /// Allocate the next QP number (24 bits, skipping numbers in use).
    pub(crate) fn alloc_qpn(&mut self) -> Option<Qpn> {
        for _ in 0..self.qpn_range.len() {
            let n = self.next_qpn;
            self.next_qpn = if n + 1 >= self.qpn_range.end {
                self.qpn_range.start
            } else {
                n + 1
            };
            if !self.qp_by_qpn.contains_key(&n) {
                return Qpn::new(n);
            }
        }
        None
    }
}
