//! The caches' size settings (`KILN_CACHE_MAX_SIZE`, `KILN_CACHE_MAX_ITEM_SIZE`,
//! `KILN_IN_MEM_CACHE_MAX`): one syntax, and a value that does not parse is an error naming
//! the variable, never a silent "no limit".

/// Parses a size in bytes: digits, optionally followed by `K`, `M`, `G` or `T` (upper or
/// lower case, optionally spelled `KiB`, `MiB`, ...), each a power of 1024. `0` means "no
/// limit" to the callers. Anything else, including a sign, a fraction, `KB` (ambiguous
/// between 1000 and 1024) and a value past `u64`, is refused with the reason.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    if num.is_empty() {
        return Err(format!("{SYNTAX}; {:?} does not start with a digit", t));
    }
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "kb" | "mb" | "gb" | "tb" => {
            return Err(format!(
                "`{suffix}` is ambiguous (1000 or 1024?); write `{}` or `{}iB` for powers \
                 of 1024, or the number of bytes",
                &suffix[..1],
                &suffix[..1],
            ))
        }
        _ => return Err(format!("{SYNTAX}; unknown suffix `{suffix}`")),
    };
    let n: u64 = num.parse().map_err(|_| format!("{num} does not fit in 64 bits"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{t} is more than 2^64 bytes"))
}

const SYNTAX: &str = "expected a size in bytes, optionally with a suffix K, M, G or T \
                      (powers of 1024), such as 65536 or 64M";

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 10K "), Ok(10 << 10));
        assert_eq!(parse_size("10k"), Ok(10 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("12B"), Ok(12));
    }

    /// `abc`, `-1` and friends used to mean "no limit" without a word.
    #[test]
    fn max_size_garbage_is_refused() {
        for bad in ["abc", "-1", "+5", "1.5G", "10KB", "10 K", "K", "", "16777216T", "1e6"] {
            let e = parse_size(bad).expect_err(bad);
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(parse_size("10KB").unwrap_err().contains("ambiguous"));
        assert!(parse_size("99999999999999999999").unwrap_err().contains("64 bits"));
        assert!(parse_size("-1").unwrap_err().contains("expected a size in bytes"));
    }
}
