//! Addresses as the program reads and writes them: 4-byte aligned `Addr` words, IPv6 addresses
//! in the packet read and written as 16-bit words, and two IPv6 header fields. Below `ip`,
//! `forward` and the ICMP paths, which all use them.
use lb_common::IpBytes;
use network_types::ip::Ipv6Hdr;

/// An IPv6 header's traffic class (it straddles the first two bytes).
#[inline(always)]
pub fn traffic_class(ip: &Ipv6Hdr) -> u8 {
    (ip.vcf[0] << 4) | (ip.vcf[1] >> 4)
}

/// Bytes from an IPv6 header to the end of its datagram: the fixed header and the payload.
#[inline(always)]
pub fn ipv6_len(ip: &Ipv6Hdr) -> u16 {
    u16::from_be_bytes(ip.payload_len).wrapping_add(lb_ebpf::packet::IPV6_LEN as u16)
}

/// A 16-byte address known to be 4-byte aligned, so it is read and compared as four words.
/// `IpBytes` alone has alignment 1, which makes LLVM copy it byte by byte (sixteen loads, and
/// as many registers spilled to a stack the program does not have).
#[repr(C, align(4))]
#[derive(Clone, Copy)]
pub struct Addr(pub IpBytes);

impl Addr {
    #[inline(always)]
    pub fn from_words(words: [u32; 4]) -> Addr {
        // SAFETY: same size, any bits valid.
        Addr(unsafe { core::mem::transmute::<[u32; 4], IpBytes>(words) })
    }

    #[inline(always)]
    pub fn words(&self) -> [u32; 4] {
        // SAFETY: 16 bytes, 4-byte aligned; any bits are valid u32s.
        unsafe { *(self as *const Addr as *const [u32; 4]) }
    }
}

/// A map structure's address field as an `Addr`. Every struct holding one in lb_common is
/// `align(4)` or more with the field at a multiple of 4, so the field is 4-byte aligned.
#[inline(always)]
pub fn field(addr: &IpBytes) -> &Addr {
    // SAFETY: see above; same size and layout.
    unsafe { &*(addr as *const IpBytes as *const Addr) }
}

/// An IPv4 address from the packet as the first word of its map form, read as two 16-bit
/// words (see `load`): a byte-wise read is four loads and the shifts to join them.
#[inline(always)]
pub fn load4(addr: &[u8; 4]) -> u32 {
    // SAFETY: 4 readable, 2-byte aligned bytes (see `load`); any bits are valid.
    let halves = unsafe { *(addr as *const [u8; 4] as *const [u16; 2]) };
    halves[0] as u32 | (halves[1] as u32) << 16
}

/// Writes an IPv4 address (the first word of its map form) into the packet as two 16-bit
/// words.
#[inline(always)]
pub fn store4(field: &mut [u8; 4], word: u32) {
    let dst = field as *mut [u8; 4] as *mut u16;
    // SAFETY: 4 writable, 2-byte aligned bytes.
    unsafe {
        dst.write(word as u16);
        dst.add(1).write((word >> 16) as u16);
    }
}

/// A 16-bit header field (a checksum, a length) as the packet holds it, read as one word.
#[inline(always)]
pub fn load16(field: &[u8; 2]) -> u16 {
    // SAFETY: 2 readable, 2-byte aligned bytes (see `load`).
    unsafe { *(field as *const [u8; 2] as *const u16) }
}

/// Writes a 16-bit header field as one word (`value` in the packet's byte order).
#[inline(always)]
pub fn store16(field: &mut [u8; 2], value: u16) {
    // SAFETY: 2 writable, 2-byte aligned bytes.
    unsafe { *(field as *mut [u8; 2] as *mut u16) = value };
}

/// An IPv6 address from the packet, read as eight 16-bit words: it sits 2-byte aligned (behind
/// Ethernet, with or without a tag, and in a quoted header), and byte-wise copies would be
/// sixteen loads.
#[inline(always)]
pub fn load(addr: &[u8; 16]) -> Addr {
    // SAFETY: 16 readable, 2-byte aligned bytes (see above); any bits are valid.
    let halves = unsafe { *(addr as *const [u8; 16] as *const [u16; 8]) };
    let word = |i: usize| halves[2 * i] as u32 | (halves[2 * i + 1] as u32) << 16;
    Addr::from_words([word(0), word(1), word(2), word(3)])
}

/// Writes an IPv6 address into the packet as eight 16-bit words (see `load`). Volatile stores:
/// from an address in a map value LLVM would otherwise merge them into a 16-byte `memmove`,
/// which the BPF backend makes a call to a byte-at-a-time loop.
#[inline(always)]
pub fn store(field: &mut [u8; 16], addr: &Addr) {
    // SAFETY: same size, any bits valid.
    let words = unsafe { core::mem::transmute::<[u32; 4], [u16; 8]>(addr.words()) };
    // SAFETY: 16 writable, 2-byte aligned bytes.
    unsafe { store_words(field as *mut [u8; 16] as *mut u16, &words) };
}

/// Writes `words` at `dst`, volatile: LLVM would otherwise gather them on the stack and copy
/// them with a call to a byte-at-a-time loop.
///
/// # Safety
/// `dst` must point to `2 * N` writable, 2-byte aligned bytes.
#[inline(always)]
pub unsafe fn store_words<const N: usize>(dst: *mut u16, words: &[u16; N]) {
    // An index loop: an array's by-value iterator would first copy the words to the stack.
    for (i, word) in words.iter().enumerate() {
        // SAFETY: in bounds, by the caller's promise.
        unsafe { dst.add(i).write_volatile(*word) };
    }
}
