//! Policy specifications: `NAME` or `NAME:KEY=VALUE,...`, several separated by commas.

use crate::policy::{OptionError, SpecSyntax};
use std::fmt;

/// One policy and the options given to it, as the user wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    pub name: String,
    pub options: Vec<(String, String)>,
}

/// Serialized as its `--policy` text.
impl serde::Serialize for PolicySpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        for (i, (k, v)) in self.options.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { ':' } else { ',' })?;
        }
        Ok(())
    }
}

/// Splits on `sep` outside square brackets (`roundup_power2_divisions=[256:1,>:4]`).
pub(crate) fn split_outside_brackets(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// Parses `pytorch:max_split_size_mb=128,roundup_power2_divisions=4,cuda-malloc`: an item with
/// `=` and no `:` before it continues the options of the policy before it.
pub fn parse_specs(text: &str) -> Result<Vec<PolicySpec>, SpecSyntax> {
    let mut specs: Vec<PolicySpec> = Vec::new();
    for item in split_outside_brackets(text, ',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let colon = split_outside_brackets(item, ':');
        let (head, first_option) = if colon.len() > 1 {
            let name_len = colon[0].len();
            (colon[0], Some(&item[name_len + 1..]))
        } else {
            (item, None)
        };
        let continues = first_option.is_none() && head.contains('=');
        if continues {
            let spec = specs
                .last_mut()
                .ok_or_else(|| SpecSyntax::OptionWithoutPolicy(item.to_string()))?;
            spec.options.push(key_value(item)?);
            continue;
        }
        let mut spec = PolicySpec {
            name: head.trim().to_string(),
            options: Vec::new(),
        };
        if let Some(option) = first_option {
            spec.options.push(key_value(option)?);
        }
        specs.push(spec);
    }
    if specs.is_empty() {
        return Err(SpecSyntax::Empty);
    }
    Ok(specs)
}

fn key_value(text: &str) -> Result<(String, String), SpecSyntax> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| SpecSyntax::NotKeyValue(text.to_string()))?;
    Ok((k.trim().to_string(), v.trim().to_string()))
}

/// Typed access to a policy's options; every key given must be one the policy knows.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    given: &'a [(String, String)],
}

impl<'a> Options<'a> {
    pub fn new(
        given: &'a [(String, String)],
        known: &[crate::policy::KeyInfo],
    ) -> Result<Self, OptionError> {
        for (k, _) in given {
            if !known.iter().any(|i| i.key == k) {
                return Err(OptionError::Unknown {
                    key: k.clone(),
                    known: known.iter().map(|i| i.key).collect(),
                });
            }
        }
        Ok(Options { given })
    }

    pub fn str_opt(&self, key: &str) -> Option<&'a str> {
        self.given
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A whole number no larger than `max` (options are multiplied and shifted by the policies:
    /// the bound keeps that arithmetic far from 2^64).
    pub fn u64_opt(&self, key: &str, max: u64) -> Result<Option<u64>, OptionError> {
        self.str_opt(key)
            .map(|v| match v.parse::<u64>() {
                Ok(n) if n <= max => Ok(n),
                Ok(_) => Err(OptionError::AboveMaximum {
                    key: key.into(),
                    value: v.into(),
                    max,
                }),
                Err(_) => Err(OptionError::NotWhole {
                    key: key.into(),
                    value: v.into(),
                }),
            })
            .transpose()
    }

    /// An alignment in bytes: a power of two (so never 0), at most 1 GiB.
    pub fn alignment_opt(&self, key: &str) -> Result<Option<u64>, OptionError> {
        self.size_opt(key)?
            .map(|a| {
                if a.is_power_of_two() && a <= 1 << 30 {
                    Ok(a)
                } else {
                    Err(OptionError::NotAnAlignment {
                        key: key.into(),
                        value: a,
                    })
                }
            })
            .transpose()
    }

    /// A size in bytes (`512MiB`, `2GB`, ...).
    pub fn size_opt(&self, key: &str) -> Result<Option<u64>, OptionError> {
        self.str_opt(key)
            .map(|v| {
                crate::units::parse_size(v).map_err(|source| OptionError::Size {
                    key: key.into(),
                    source,
                })
            })
            .transpose()
    }

    pub fn f64(&self, key: &str, default: f64) -> Result<f64, OptionError> {
        match self.str_opt(key) {
            None => Ok(default),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| OptionError::NotANumber {
                    key: key.into(),
                    value: v.into(),
                }),
        }
    }

    pub fn bool(&self, key: &str, default: bool) -> Result<bool, OptionError> {
        match self.str_opt(key) {
            None => Ok(default),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(OptionError::NotABool {
                    key: key.into(),
                    value: v.into(),
                }),
            },
        }
    }
}

/// PyTorch's `roundup_power2_divisions`, in both forms: one number for every size, or
/// `[B:d,...,>:d]` per power-of-two interval (`AcceleratorAllocatorConfig::
/// parseRoundUpPower2Divisions`). A key `B` (MiB, a power of two) sets interval `log2(B)`, that
/// is sizes `[B, 2B)` MiB; the first key also fills the intervals below it; `>` fills every
/// interval after the last key.
pub fn parse_divisions(text: &str) -> Result<[u64; 16], OptionError> {
    let mut table = [0u64; 16];
    let text = text.trim();
    let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
        let value: u64 = text
            .parse()
            .map_err(|_| format!("roundup_power2_divisions={text}: not a number or a list"))?;
        if !value.is_power_of_two() {
            return Err(format!(
                "roundup_power2_divisions={value}: the divisions must be a power of 2"
            )
            .into());
        }
        return Ok([value; 16]);
    };
    let (mut first, mut last_index) = (true, 0usize);
    for entry in inner.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (key, value) = entry.split_once(':').ok_or_else(|| {
            format!("roundup_power2_divisions: `{entry}` is not BOUNDARY:DIVISIONS")
        })?;
        let value: u64 = value.trim().parse().map_err(|_| {
            format!("roundup_power2_divisions: `{entry}` has no number of divisions")
        })?;
        if value != 0 && !value.is_power_of_two() {
            return Err(format!(
                "roundup_power2_divisions: `{entry}`: divisions must be a power of 2 or 0"
            )
            .into());
        }
        if key.trim() == ">" {
            for slot in table.iter_mut().skip(last_index + 1) {
                *slot = value;
            }
            continue;
        }
        let boundary: u64 = key
            .trim()
            .parse()
            .map_err(|_| format!("roundup_power2_divisions: `{entry}` has no boundary"))?;
        if !boundary.is_power_of_two() {
            return Err(format!(
                "roundup_power2_divisions: `{entry}`: the interval must be a power of 2"
            )
            .into());
        }
        let index = (63 - boundary.leading_zeros() as usize).min(15);
        if first {
            for slot in table.iter_mut().take(index) {
                *slot = value;
            }
            first = false;
        }
        table[index] = value;
        last_index = index;
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_policies_and_their_options() {
        let s = parse_specs("pytorch:max_split_size_mb=128,roundup_power2_divisions=4,cuda-malloc")
            .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "pytorch");
        assert_eq!(
            s[0].options,
            vec![
                ("max_split_size_mb".into(), "128".into()),
                ("roundup_power2_divisions".into(), "4".into())
            ]
        );
        assert_eq!(s[1].to_string(), "cuda-malloc");
        assert_eq!(
            s[0].to_string(),
            "pytorch:max_split_size_mb=128,roundup_power2_divisions=4"
        );
    }

    #[test]
    fn bracketed_values_keep_their_commas_and_colons() {
        let s = parse_specs("pytorch:roundup_power2_divisions=[256:1,512:2,>:4]").unwrap();
        assert_eq!(s[0].options[0].1, "[256:1,512:2,>:4]");
    }

    #[test]
    fn an_option_without_a_policy_is_an_error() {
        assert!(parse_specs("a=1").is_err());
        assert!(parse_specs("").is_err());
    }

    #[test]
    fn divisions_list_follows_the_code_not_the_docs() {
        // Key 256 is interval log2(256) = 8: sizes [256, 512) MiB. The first key also fills
        // the intervals below it; `>` fills those after the last key.
        let t = parse_divisions("[256:1,512:2,>:4]").unwrap();
        assert_eq!(&t[..8], &[1; 8]);
        assert_eq!(t[8], 1);
        assert_eq!(t[9], 2);
        assert_eq!(&t[10..], &[4; 6]);
        assert_eq!(parse_divisions("4").unwrap(), [4; 16]);
        assert!(parse_divisions("3").is_err());
        assert!(parse_divisions("[3:2]").is_err());
    }
}
