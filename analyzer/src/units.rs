//! Parsing and printing of byte sizes, counts and durations, the same in every command.

/// A size that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("`{0}` is not a size (try 4096, 512MiB, 80GiB or 80GB)")]
    NotASize(String),
    #[error("`{0}` is too large (sizes stop at 1 PiB)")]
    TooLarge(String),
    #[error("`{0}` has no unit: write {0}GiB or {0}GB (decimal), or {0}B for exact bytes")]
    NoUnit(String),
}

/// The largest size any argument or policy option accepts: a pebibyte, far above any device,
/// and far enough below 2^64 that no rounding, doubling or sum of a few such sizes wraps.
pub const LARGEST_SIZE: u64 = 1 << 50;

/// Parses a size: `123`, `4KiB`, `1.5GiB`, `80GB`, `512MB`, `2M` (binary), case-insensitive.
///
/// Decimal suffixes (`KB`, `MB`, `GB`, `TB`) are powers of 1000, binary ones (`KiB`, `MiB`,
/// `GiB`, `TiB`, and the bare `K`, `M`, `G`, `T` as `nvidia-smi` and PyTorch use them) powers of
/// 1024.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(SizeError::NotASize(text.to_string())),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| SizeError::NotASize(text.to_string()))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes > LARGEST_SIZE as f64 {
        return Err(SizeError::TooLarge(text.to_string()));
    }
    Ok(bytes.round() as u64)
}

/// The one rule for sizes on the command line (`--capacity`, `--context`, `--gpu`): a number
/// needs its unit, so `80` is refused rather than read as 80 bytes by one flag and an 80 GB
/// board by another; otherwise as [`parse_size`].
pub fn parse_size_arg(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(SizeError::NoUnit(t.to_string()));
    }
    parse_size(t)
}

/// The device memory of a board sold as `gb` GB, taken as `gb` GiB: boards report within a
/// few percent of that (the H200 "141 GB": 143,771 MiB); `--capacity` takes an exact figure.
pub const fn gpu_bytes(gb: u64) -> u64 {
    gb << 30
}

/// Parses a GPU's size as boards are sold: `24GB` is a board of 24 GB, taken as 24 GiB
/// ([`gpu_bytes`]); any other unit is exact, and a bare number refused,
/// as in [`parse_size_arg`].
pub fn parse_gpu_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let board = t
        .strip_suffix("GB")
        .or_else(|| t.strip_suffix("gb"))
        .and_then(|n| n.trim().parse::<u64>().ok());
    match board {
        Some(gb) if gb > 0 && gb < 1 << 20 => Ok(gpu_bytes(gb)),
        _ => parse_size_arg(t),
    }
}

/// `1536` → `1.50 KiB`; below 1 KiB, plain bytes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.2} {}", UNITS[unit])
}

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds as `850 ns`, `12.3 µs`, `4.56 ms`, `7.89 s`.
pub fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_size("1.5 gib"), Ok(3 << 29));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert!(parse_size("12 apples").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("1e30GiB").is_err());
        assert_eq!(parse_size("1024TiB"), Ok(LARGEST_SIZE));
        assert_eq!(
            parse_size("18446744073709551615"),
            Err(SizeError::TooLarge("18446744073709551615".into()))
        );
    }

    #[test]
    fn a_bare_number_is_refused_by_every_size_flag_alike() {
        let no_unit = SizeError::NoUnit("80".into());
        assert_eq!(parse_size_arg("80"), Err(no_unit.clone()));
        assert_eq!(parse_gpu_size("80"), Err(no_unit.clone()));
        assert_eq!(
            no_unit.to_string(),
            "`80` has no unit: write 80GiB or 80GB (decimal), or 80B for exact bytes"
        );
        assert_eq!(parse_size_arg("80B"), Ok(80));
        assert_eq!(parse_size_arg("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_gpu_size("80GB"), Ok(80 << 30));
        assert_eq!(parse_gpu_size("80GiB"), Ok(80 << 30));
    }

    #[test]
    fn numbers_print_for_humans() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(80 << 30), "80.00 GiB");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(duration(850), "850 ns");
        assert_eq!(duration(4_560_000), "4.56 ms");
    }
}
