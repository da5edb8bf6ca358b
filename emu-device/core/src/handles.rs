//! Typed handles to the device's objects. Each carries a generation, so a handle kept after
//! its object was destroyed is refused instead of naming a newer object in the same slot.

use core::fmt;
use core::marker::PhantomData;

use super::error::{VerbsError, VerbsResult};

macro_rules! handle {
    ($(#[$m:meta])* $name:ident, $kind:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name {
            pub(crate) index: u32,
            pub(crate) generation: u32,
        }

        impl $name {
            /// Object kind, for messages.
            pub const KIND: &'static str = $kind;

            /// Pack into a `u64` (for C ABI handles): generation in the high half.
            pub const fn to_raw(self) -> u64 {
                ((self.generation as u64) << 32) | self.index as u64
            }

            /// Unpack a value made by `to_raw`.
            pub const fn from_raw(raw: u64) -> Self {
                Self { index: raw as u32, generation: (raw >> 32) as u32 }
            }

            /// A handle no object ever has (its lookups fail): what an XRC target QP holds
            /// for the PD and CQs it does not have.
            #[allow(dead_code)]
            pub(crate) const NONE: Self = Self { index: u32::MAX, generation: u32::MAX };
        }

        impl Handle for $name {
            const KIND: &'static str = $kind;
            fn from_parts(index: u32, generation: u32) -> Self {
                Self { index, generation }
            }
            fn index(self) -> u32 {
                self.index
            }
            fn generation(self) -> u32 {
                self.generation
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}#{}.{}", $kind, self.index, self.generation)
            }
        }
    };
}

handle!(/// A protection domain.
    PdHandle, "PD");
handle!(/// A memory region.
    MrHandle, "MR");
handle!(/// A memory window.
    MwHandle, "MW");
handle!(/// A device memory allocation (`ibv_alloc_dm`).
    DmHandle, "DM");
handle!(/// An address handle.
    AhHandle, "AH");
handle!(/// A completion queue.
    CqHandle, "CQ");
handle!(/// A completion channel.
    ChannelHandle, "completion channel");
handle!(/// A shared receive queue.
    SrqHandle, "SRQ");
handle!(/// A queue pair.
    QpHandle, "QP");
handle!(/// An XRC domain (`ibv_open_xrcd`).
    XrcdHandle, "XRCD");

/// A handle type naming one kind of object in a [`Table`].
pub(crate) trait Handle: Copy + 'static {
    /// Object kind, for messages.
    const KIND: &'static str;
    fn from_parts(index: u32, generation: u32) -> Self;
    fn index(self) -> u32;
    fn generation(self) -> u32;
}

/// Slab storage addressed by typed handles whose generation must match, so a stale handle
/// finds nothing instead of a newer object in the same slot.
#[derive(Debug)]
pub(crate) struct Table<H, T> {
    slab: slab::Slab<(u32, T)>,
    next_generation: u32,
    handle: PhantomData<H>,
}

impl<H, T> Default for Table<H, T> {
    fn default() -> Self {
        Self {
            slab: slab::Slab::new(),
            next_generation: 1,
            handle: PhantomData,
        }
    }
}

impl<H: Handle, T> Table<H, T> {
    pub(crate) fn insert(&mut self, value: T) -> H {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let index = self.slab.insert((generation, value)) as u32;
        H::from_parts(index, generation)
    }

    pub(crate) fn get(&self, h: H) -> Option<&T> {
        match self.slab.get(h.index() as usize) {
            Some((g, v)) if *g == h.generation() => Some(v),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, h: H) -> Option<&mut T> {
        match self.slab.get_mut(h.index() as usize) {
            Some((g, v)) if *g == h.generation() => Some(v),
            _ => None,
        }
    }

    /// The object, or the stale-handle error `verb` reports.
    pub(crate) fn lookup(&self, verb: &'static str, h: H) -> VerbsResult<&T> {
        self.get(h).ok_or_else(|| stale::<H>(verb))
    }

    /// The object for changing, or the stale-handle error `verb` reports.
    pub(crate) fn lookup_mut(&mut self, verb: &'static str, h: H) -> VerbsResult<&mut T> {
        self.get_mut(h).ok_or_else(|| stale::<H>(verb))
    }

    /// Remove the object, or report the stale handle.
    pub(crate) fn remove(&mut self, verb: &'static str, h: H) -> VerbsResult<T> {
        self.lookup(verb, h)?;
        Ok(self.slab.remove(h.index() as usize).1)
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    /// Every object, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().map(|(_, (_, v))| v)
    }
}

fn stale<H: Handle>(verb: &'static str) -> VerbsError {
    VerbsError::StaleHandle {
        verb,
        kind: H::KIND,
    }
}
