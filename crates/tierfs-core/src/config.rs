//! Parsing of sizes and durations as users write them on the command line,
//! in mount options and in `user.tierfs.*` xattrs.

use std::time::Duration;

/// Parses a size: a number with an optional unit K, M, G or T (powers of
/// 1024; "KiB", "KB", "k" are the same). A plain number is bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("{s:?} is not a size (examples: 4096, 64K, 1M, 10G)"));
    }
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let mult: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown size unit (use K, M, G or T)")),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Seconds of a year (365.25 days).
pub const YEAR_SECS: f64 = 365.25 * 86400.0;

/// Parses a duration: a number with an optional unit us (or µs), ms, s,
/// m, h, d, w or y (365.25 days). A plain number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("{s:?} is not a duration (examples: 5s, 80s, 10m, 1h)"));
    }
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration"))?;
    let secs = match unit.trim().to_ascii_lowercase().as_str() {
        "us" | "µs" | "μs" => v / 1e6,
        "ms" => v / 1000.0,
        "" | "s" | "sec" | "secs" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        "w" => v * 7.0 * 86400.0,
        "y" => v * YEAR_SECS,
        _ => return Err(format!("{s:?}: unknown duration unit (use us, ms, s, m, h, d, w or y)")),
    };
    if !secs.is_finite() || !(0.0..=1e12).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Prints a size for people, in the largest unit that fits (K, M, G, T
/// are powers of 1024), readable back by [`parse_size`].
pub fn format_size(b: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (m, u) in UNITS {
        if b >= m {
            let v = b as f64 / m as f64;
            return if b.is_multiple_of(m) || v >= 100.0 { format!("{v:.0}{u}") } else { format!("{v:.1}{u}") };
        }
    }
    format!("{b}")
}

/// Prints a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    if s != 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s != 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size(" 10G "), Ok(10 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("ten").is_err());
        assert!(parse_size("5X").is_err());
        assert!(parse_size("-1").is_err());
        assert_eq!(format_size(1 << 20), "1M");
        assert_eq!(format_size(1536), "1.5K");
        assert_eq!(parse_size(&format_size(3 << 30)), Ok(3 << 30));
        assert_eq!(format_size(270553174016), "252G");
        assert_eq!(format_size(999), "999");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("80"), Ok(Duration::from_secs(80)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("200us"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("200µs"), Ok(Duration::from_micros(200)));
        assert_eq!(parse_duration("200μs"), Ok(Duration::from_micros(200)), "Greek mu too");
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5x").is_err());
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("2y"), Ok(Duration::from_secs_f64(2.0 * 365.25 * 86_400.0)));
        assert_eq!(format_duration(Duration::from_secs(80)), "80s");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }
}
