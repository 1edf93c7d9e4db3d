//! An address block, `10.0.0.0/8` or `fd00::/8` (a bare address is a block of
//! one), for `trusted_proxies`.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub const LOOPBACK_V4: Cidr = Cidr {
        network: IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 0)),
        prefix: 8,
    };
    pub const LOOPBACK_V6: Cidr = Cidr {
        network: IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        prefix: 128,
    };

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u32::from(net).into(), 32, self.prefix)
                    == masked(u32::from(ip).into(), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(net.into(), 128, self.prefix) == masked(ip.into(), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// The first `prefix` of `bits` bits of `value`.
fn masked(value: u128, bits: u8, prefix: u8) -> u128 {
    let host_bits = u32::from(bits - prefix);
    value.checked_shr(host_bits).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || format!("{text:?} is not an address or an address/prefix block");
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let network: IpAddr = address.parse().map_err(|_| invalid())?;
        let network = network.to_canonical();
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(invalid)?,
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().expect("cidr")
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("ip")
    }

    #[test]
    fn blocks_hold_their_addresses_only() {
        assert!(cidr("10.0.0.0/8").contains(ip("10.200.3.4")));
        assert!(!cidr("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(cidr("192.168.1.7").contains(ip("192.168.1.7")));
        assert!(!cidr("192.168.1.7").contains(ip("192.168.1.8")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.1")));
        assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(cidr("fd00::/8").contains(ip("fd12::1")));
        assert!(!cidr("fd00::/8").contains(ip("fe80::1")));
        assert!(Cidr::LOOPBACK_V4.contains(ip("::ffff:127.0.0.1")));
        assert!(Cidr::LOOPBACK_V6.contains(ip("::1")));
        assert!(!Cidr::LOOPBACK_V6.contains(ip("::2")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert_eq!(cidr("10.1.2.3/8").to_string(), "10.1.2.3/8");
    }

    #[test]
    fn bad_blocks_are_refused() {
        for bad in [
            "",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0/8",
            "fd00::/129",
            "a/8",
            "1.2.3.4/-1",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
