//! Amounts in minor units (cents, yen, fils), as `payments` stores them, from the
//! decimal text some providers send ("10.00"), and back as people read them
//! (the desk's pages). Pure: the exponent of a currency is ISO 4217's.

/// ISO 4217 currencies with no minor unit.
const NO_MINOR_UNIT: [&str; 16] = [
    "BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV",
    "XAF", "XOF", "XPF",
];

/// ISO 4217 currencies with three decimals.
const THREE_DECIMALS: [&str; 7] = ["BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"];

/// How many decimals a currency's minor unit has (any letter case); 2 for those
/// not listed.
pub fn exponent(currency: &str) -> u32 {
    let code = currency.trim().to_ascii_uppercase();
    if NO_MINOR_UNIT.contains(&code.as_str()) {
        0
    } else if THREE_DECIMALS.contains(&code.as_str()) {
        3
    } else {
        2
    }
}

/// Why a decimal amount has no minor units; each says the amount as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("the amount {0:?} is negative")]
    Negative(String),
    #[error("the amount {0:?} is not a decimal number (digits, optionally a point and digits)")]
    NotDecimal(String),
    #[error("the amount {decimal:?} has {decimals} decimals, more than {currency}'s {exponent}")]
    TooPrecise {
        decimal: String,
        decimals: usize,
        currency: String,
        exponent: u32,
    },
    #[error("the amount {0:?} is too large to store")]
    TooLarge(String),
}

/// `decimal` ("10.5", "10.50", "1050" — digits, at most one point) in `currency`'s
/// minor units: "10.5" EUR is 1050, "1050" JPY is 1050, "1.005" KWD is 1005. The
/// error is one line saying why.
pub fn minor_units(decimal: &str, currency: &str) -> Result<i64, AmountError> {
    let text = decimal.trim();
    if text.starts_with('-') {
        return Err(AmountError::Negative(decimal.to_string()));
    }
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || text.ends_with('.') {
        return Err(AmountError::NotDecimal(decimal.to_string()));
    }
    let exponent = exponent(currency);
    if fraction.len() > exponent as usize {
        return Err(AmountError::TooPrecise {
            decimal: decimal.to_string(),
            decimals: fraction.len(),
            currency: currency.to_string(),
            exponent,
        });
    }
    let padded = format!("{whole}{fraction:0<width$}", width = exponent as usize);
    padded
        .parse::<i64>()
        .map_err(|_| AmountError::TooLarge(decimal.to_string()))
}

/// An amount in `currency`'s minor units as people read it, in the major unit
/// with the currency's decimals and its code in capitals: 34800 USD is
/// "348.00 USD", 5000 JPY "5000 JPY", 1005 KWD "1.005 KWD".
pub fn readable(minor: i64, currency: &str) -> String {
    let code = currency.trim().to_ascii_uppercase();
    let sign = if minor < 0 { "-" } else { "" };
    let digits = minor.unsigned_abs().to_string();
    let decimals = exponent(&code) as usize;
    if decimals == 0 {
        return format!("{sign}{digits} {code}");
    }
    let padded = format!("{digits:0>width$}", width = decimals + 1);
    let (whole, fraction) = padded.split_at(padded.len() - decimals);
    format!("{sign}{whole}.{fraction} {code}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minor_units_read_as_money_by_the_currencys_exponent() {
        let cases = [
            (34800, "USD", "348.00 USD"),
            (34800, "usd", "348.00 USD"),
            (5, "eur", "0.05 EUR"),
            (0, "GBP", "0.00 GBP"),
            (5000, "JPY", "5000 JPY"),
            (1005, "kwd", "1.005 KWD"),
            (7, "BHD", "0.007 BHD"),
            (-250, "USD", "-2.50 USD"),
        ];
        for (minor, currency, expected) in cases {
            assert_eq!(readable(minor, currency), expected, "{minor} {currency}");
        }
        // Read back, they are the same minor units.
        assert_eq!(minor_units("1.005", "KWD"), Ok(1005));
    }

    #[test]
    fn exponents_follow_iso_4217() {
        for code in [
            "JPY", "krw", "VND", "CLP", "ISK", "UGX", "XAF", "XOF", "XPF",
        ] {
            assert_eq!(exponent(code), 0, "{code}");
        }
        for code in ["BHD", "JOD", "kwd", "OMR", "TND", "IQD", "LYD"] {
            assert_eq!(exponent(code), 3, "{code}");
        }
        for code in ["EUR", "usd", "GBP", "CHF", "unknown"] {
            assert_eq!(exponent(code), 2, "{code}");
        }
    }

    #[test]
    fn decimals_become_minor_units() {
        let cases = [
            ("10.00", "USD", 1000),
            ("10.5", "eur", 1050),
            ("10", "EUR", 1000),
            ("0.01", "GBP", 1),
            (" 7.25 ", "USD", 725),
            ("1050", "JPY", 1050),
            ("1.005", "KWD", 1005),
            ("1.5", "BHD", 1500),
            ("0", "USD", 0),
            ("92233720368547758.07", "USD", i64::MAX),
        ];
        for (decimal, currency, minor) in cases {
            assert_eq!(
                minor_units(decimal, currency),
                Ok(minor),
                "{decimal} {currency}"
            );
        }
    }

    #[test]
    fn more_decimals_than_the_currency_has_are_refused() {
        let cases = [
            ("10.001", "USD", "has 3 decimals, more than USD's 2"),
            ("10.5", "JPY", "has 1 decimals, more than JPY's 0"),
            ("1.0005", "KWD", "has 4 decimals, more than KWD's 3"),
        ];
        for (decimal, currency, reason) in cases {
            let err = minor_units(decimal, currency)
                .expect_err(decimal)
                .to_string();
            assert!(err.contains(reason), "{decimal} {currency}: {err}");
        }
    }

    #[test]
    fn negatives_overflow_and_garbage_say_why() {
        let cases = [
            ("-1.00", "is negative"),
            ("-0", "is negative"),
            ("92233720368547758.08", "too large to store"),
            ("99999999999999999999", "too large to store"),
            ("", "not a decimal number"),
            (".5", "not a decimal number"),
            ("5.", "not a decimal number"),
            ("1.2.3", "not a decimal number"),
            ("1,50", "not a decimal number"),
            ("+1", "not a decimal number"),
            ("1e3", "not a decimal number"),
            ("ten", "not a decimal number"),
            ("1 000", "not a decimal number"),
            ("١٠", "not a decimal number"),
        ];
        for (decimal, reason) in cases {
            let err = minor_units(decimal, "USD").expect_err(decimal).to_string();
            assert!(err.contains(reason), "{decimal:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
