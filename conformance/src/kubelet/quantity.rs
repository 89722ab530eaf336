//! Just enough of Kubernetes resource quantities for the downward API
//! (`resourceFieldRef` with a divisor) and the node's capacity.

use thiserror::Error;

/// A quantity in nano-units: exact for every suffix from `n` to `Ei`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Nanos(pub i128);

#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

const NANO: i128 = 1_000_000_000;

/// Parses `1`, `0.5`, `250m`, `2Gi`, `1e3`, `128974848` into nano-units.
pub fn parse(text: &str) -> Result<Nanos, QuantityError> {
    let bad = || QuantityError(text.to_string());
    let s = text.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err(bad());
    }
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if frac.contains('.') {
        return Err(bad());
    }
    // Value = digits / 10^frac_len, kept as an integer plus a decimal shift.
    let digits: String = format!("{whole}{frac}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| bad())?
    };
    let mut decimal_exp: i32 = -(frac.len() as i32);
    let mut binary_mult: i128 = 1;
    match suffix {
        "" => {}
        "n" => decimal_exp -= 9,
        "u" => decimal_exp -= 6,
        "m" => decimal_exp -= 3,
        "k" => decimal_exp += 3,
        "M" => decimal_exp += 6,
        "G" => decimal_exp += 9,
        "T" => decimal_exp += 12,
        "P" => decimal_exp += 15,
        "E" => decimal_exp += 18,
        "Ki" => binary_mult = 1 << 10,
        "Mi" => binary_mult = 1 << 20,
        "Gi" => binary_mult = 1 << 30,
        "Ti" => binary_mult = 1 << 40,
        "Pi" => binary_mult = 1 << 50,
        "Ei" => binary_mult = 1 << 60,
        other => {
            let exp = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(bad)?;
            decimal_exp += exp.parse::<i32>().map_err(|_| bad())?;
        }
    }
    // Into nano-units: multiply by 10^9, then apply the decimal exponent.
    decimal_exp += 9;
    let mut value = mantissa.checked_mul(binary_mult).ok_or_else(bad)?;
    if decimal_exp >= 0 {
        let scale = 10i128.checked_pow(decimal_exp as u32).ok_or_else(bad)?;
        value = value.checked_mul(scale).ok_or_else(bad)?;
    } else {
        // Below a nano-unit: round up, as Kubernetes does for quantities.
        let scale = 10i128
            .checked_pow(decimal_exp.unsigned_abs())
            .ok_or_else(bad)?;
        value = (value + scale - 1) / scale;
    }
    Ok(Nanos(if negative { -value } else { value }))
}

/// `ceil(value / divisor)`, the downward API's rule, as an integer string.
pub fn divide_ceil(value: Nanos, divisor: Nanos) -> Result<String, QuantityError> {
    if divisor.0 <= 0 {
        return Err(QuantityError("divisor must be positive".into()));
    }
    let q = value.0.div_euclid(divisor.0);
    let r = value.0.rem_euclid(divisor.0);
    Ok((if r > 0 { q + 1 } else { q }).to_string())
}

impl Nanos {
    pub fn units(units: i128) -> Self {
        Nanos(units * NANO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_suffixes_kubernetes_writes() {
        assert_eq!(parse("2").unwrap(), Nanos::units(2));
        assert_eq!(parse("250m").unwrap(), Nanos(250_000_000));
        assert_eq!(parse("0.5").unwrap(), Nanos(500_000_000));
        assert_eq!(parse("1Ki").unwrap(), Nanos::units(1024));
        assert_eq!(parse("2Gi").unwrap(), Nanos::units(2 << 30));
        assert_eq!(parse("1k").unwrap(), Nanos::units(1000));
        assert_eq!(parse("1e3").unwrap(), Nanos::units(1000));
        assert_eq!(parse("1.5M").unwrap(), Nanos::units(1_500_000));
        assert_eq!(parse("1n").unwrap(), Nanos(1));
        assert_eq!(parse("-1").unwrap(), Nanos::units(-1));
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        for bad in ["", "abc", "1X", "1.2.3", ".", "1e"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn divides_rounding_up_like_the_downward_api() {
        let cpu = parse("250m").unwrap();
        assert_eq!(divide_ceil(cpu, parse("1").unwrap()).unwrap(), "1");
        assert_eq!(divide_ceil(cpu, parse("1m").unwrap()).unwrap(), "250");
        let mem = parse("64Mi").unwrap();
        assert_eq!(divide_ceil(mem, parse("1Mi").unwrap()).unwrap(), "64");
        assert_eq!(divide_ceil(mem, parse("1").unwrap()).unwrap(), "67108864");
        assert!(divide_ceil(mem, Nanos(0)).is_err());
    }
}
