//! Typed handles to the device's objects. Each carries a generation, so a handle kept after
//! its object was destroyed is refused instead of naming a newer object in the same slot.

use core::fmt;

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

/// Slab storage whose entries carry the generation they were created with.
#[derive(Debug)]
pub(crate) struct Table<T> {
    slab: slab::Slab<(u32, T)>,
    next_generation: u32,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Self {
            slab: slab::Slab::new(),
            next_generation: 1,
        }
    }
}

impl<T> Table<T> {
    pub(crate) fn insert(&mut self, value: T) -> (u32, u32) {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let index = self.slab.insert((generation, value)) as u32;
        (index, generation)
    }

    pub(crate) fn get(&self, index: u32, generation: u32) -> Option<&T> {
        match self.slab.get(index as usize) {
            Some((g, v)) if *g == generation => Some(v),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut T> {
        match self.slab.get_mut(index as usize) {
            Some((g, v)) if *g == generation => Some(v),
            _ => None,
        }
    }

    pub(crate) fn remove(&mut self, index: u32, generation: u32) -> Option<T> {
        self.get(index, generation)?;
        Some(self.slab.remove(index as usize).1)
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }
}
