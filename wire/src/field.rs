//! Big-endian field access shared by the header views.

/// Read a big-endian unsigned integer of `bytes.len()` ≤ 8 bytes.
#[inline]
pub(crate) fn read_be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Write the low `out.len()` ≤ 8 bytes of `value` big-endian.
#[inline]
pub(crate) fn write_be(out: &mut [u8], value: u64) {
    let n = out.len();
    for (i, b) in out.iter_mut().enumerate() {
        *b = (value >> (8 * (n - 1 - i))) as u8;
    }
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
