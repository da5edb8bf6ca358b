//! Big-endian field access shared by the header views.

/// Read a big-endian unsigned integer of `bytes.len()` ≤ 8 bytes.
#[inline]
pub(crate) fn read_be(bytes: &[u8]) -> u64 {
    // Through a fixed array: one load and a byte swap where the width is known, instead of
    // a shift per byte (the header fields are read and written on every packet).
    let mut wide = [0u8; 8];
    let n = bytes.len().min(8);
    wide[8 - n..].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(wide)
}

/// Write the low `out.len()` ≤ 8 bytes of `value` big-endian.
#[inline]
pub(crate) fn write_be(out: &mut [u8], value: u64) {
    let n = out.len().min(8);
    out[..n].copy_from_slice(&value.to_be_bytes()[8 - n..]);
}

/// Define a zero-copy view of a fixed-size header: `new_unchecked`, `new_checked`,
/// `check_len`, `into_inner`, and a getter/setter pair per big-endian field.
macro_rules! header_view {
    (
        $(#[$meta:meta])*
        $view:ident, $header:expr, $len:expr,
        { $( $(#[$fmeta:meta])* $get:ident, $set:ident : $ty:ty = $range:expr; )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $view<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $view<T> {
            /// Header length in bytes.
            pub const LEN: usize = $len;

            /// Wrap a buffer without checking its length (getters may then panic).
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wrap a buffer after checking it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::error::Result<Self> {
                let view = Self::new_unchecked(buffer);
                view.check_len()?;
                Ok(view)
            }

            /// Check the buffer holds the whole header; no getter panics after this succeeds.
            pub fn check_len(&self) -> $crate::error::Result<()> {
                $crate::error::need($header, self.buffer.as_ref().len(), $len)
            }

            /// Give the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            $(
                $(#[$fmeta])*
                #[inline]
                pub fn $get(&self) -> $ty {
                    $crate::field::read_be(&self.buffer.as_ref()[$range]) as $ty
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $(
                #[doc = concat!("Set the field read by [`", stringify!($view), "::", stringify!($get), "`].")]
                #[inline]
                pub fn $set(&mut self, value: $ty) {
                    $crate::field::write_be(&mut self.buffer.as_mut()[$range], value as u64);
                }
            )*
        }
    };
}

pub(crate) use header_view;

#[cfg(test)]
mod tests {
    use super::{read_be, write_be};

    #[test]
    fn every_width_round_trips_big_endian_and_writes_only_its_bytes() {
        for n in 1..=8 {
            let value = 0x0102_0304_0506_0708u64 & (u64::MAX >> (64 - 8 * n));
            let mut buf = [0xEEu8; 10];
            write_be(&mut buf[1..1 + n], value);
            let expected: Vec<u8> = (9 - n as u8..=8).collect();
            assert_eq!(&buf[1..1 + n], &expected[..], "width {n}");
            assert_eq!(
                (buf[0], buf[1 + n]),
                (0xEE, 0xEE),
                "neighbours of width {n}"
            );
            assert_eq!(read_be(&buf[1..1 + n]), value, "width {n}");
        }
    }
}
