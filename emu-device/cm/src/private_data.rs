//! rdma_cm's private data: a `cma_hdr` (addresses and source port) then the application's
//! bytes, in every REQ and SIDR_REQ rdma_cm sends for an IP address.

use softroce_wire::cm::{CMA_HDR_LEN, CmaHdr, CmaHdrRepr};

use crate::types::{CmError, room};

/// The private data of a REQ as rdma_cm builds it: `hdr`, then `user_data` (at most
/// 92 − 36 = 56 bytes).
pub fn cma_private_data(hdr: &CmaHdrRepr, user_data: &[u8]) -> Result<Vec<u8>, CmError> {
    with_cma_hdr(hdr, user_data, room::REQ)
}

/// The private data of a SIDR_REQ as rdma_cm builds it: `hdr`, then `user_data` (at most
/// 216 − 36 = 180 bytes).
pub fn cma_sidr_private_data(hdr: &CmaHdrRepr, user_data: &[u8]) -> Result<Vec<u8>, CmError> {
    with_cma_hdr(hdr, user_data, room::SIDR_REQ)
}

/// Split received REQ or SIDR_REQ private data into its `cma_hdr` and the application's
/// bytes; `None` when it does not start with a valid header.
pub fn split_cma_private_data(private_data: &[u8]) -> Option<(CmaHdrRepr, &[u8])> {
    let hdr = CmaHdrRepr::parse(&CmaHdr::new_checked(private_data).ok()?).ok()?;
    Some((hdr, &private_data[CMA_HDR_LEN..]))
}

fn with_cma_hdr(
    hdr: &CmaHdrRepr,
    user_data: &[u8],
    (max, message): (usize, &'static str),
) -> Result<Vec<u8>, CmError> {
    let len = CMA_HDR_LEN + user_data.len();
    if len > max {
        return Err(CmError::PrivateDataTooLong { len, max, message });
    }
    let mut out = vec![0u8; len];
    hdr.emit(&mut CmaHdr::new_unchecked(&mut out[..]));
    out[CMA_HDR_LEN..].copy_from_slice(user_data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softroce_wire::cm::CmaAddrs;

    fn hdr() -> CmaHdrRepr {
        CmaHdrRepr {
            src_port: 40000,
            addrs: CmaAddrs::V4 {
                src: [10, 0, 0, 2].into(),
                dst: [10, 0, 0, 1].into(),
            },
        }
    }

    #[test]
    fn header_then_user_bytes_round_trip() {
        let pd = cma_private_data(&hdr(), b"hello").unwrap();
        assert_eq!(pd.len(), 41);
        let (parsed, user) = split_cma_private_data(&pd).unwrap();
        assert_eq!(parsed, hdr());
        assert_eq!(user, b"hello");
    }

    #[test]
    fn user_bytes_beyond_the_room_are_refused() {
        assert!(cma_private_data(&hdr(), &[0; 56]).is_ok());
        assert_eq!(
            cma_private_data(&hdr(), &[0; 57]),
            Err(CmError::PrivateDataTooLong {
                len: 93,
                max: 92,
                message: "REQ"
            })
        );
        assert!(cma_sidr_private_data(&hdr(), &[0; 180]).is_ok());
        assert!(cma_sidr_private_data(&hdr(), &[0; 181]).is_err());
        assert!(split_cma_private_data(&[0; 10]).is_none());
    }
}
