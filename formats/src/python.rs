//! Conventions for Python frames ([`crate::PythonFrame`]) shared by every writer: the recorder,
//! which reads them from the interpreter, and the PyTorch snapshot import.

/// The dotted module name of a Python source file, from its path alone: the part after the
/// last `site-packages/`, `dist-packages/` or `lib/pythonX.Y/` directory
/// (`/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py` → `torch.nn.modules.linear`,
/// `/usr/lib/python3.12/threading.py` → `threading`), a package's `__init__.py` naming the
/// package; otherwise the file's stem (`/work/train.py` → `train`). Empty for names that are
/// not files (`<string>`, `<frozen importlib._bootstrap>` keeps its inner name).
pub fn module_of_file(file: &str) -> String {
    if let Some(inner) = file
        .strip_prefix("<frozen ")
        .and_then(|f| f.strip_suffix('>'))
    {
        return inner.to_string();
    }
    if file.starts_with('<') {
        return String::new();
    }
    let rest = ["/site-packages/", "/dist-packages/"]
        .iter()
        .filter_map(|marker| file.rfind(marker).map(|i| &file[i + marker.len()..]))
        .min_by_key(|rest| rest.len())
        .or_else(|| stdlib_relative(file));
    let relative = match rest {
        Some(r) => r,
        None => file.rsplit('/').next().unwrap_or(file),
    };
    let stem = relative
        .strip_suffix(".py")
        .or_else(|| relative.strip_suffix(".pyc"))
        .unwrap_or(relative);
    let stem = stem.strip_suffix("/__init__").unwrap_or(stem);
    stem.trim_matches('/').replace('/', ".")
}

/// The part of `file` after `lib/pythonX.Y/`, if it lies in a standard library directory.
fn stdlib_relative(file: &str) -> Option<&str> {
    let i = file.rfind("/lib/python")?;
    let after = &file[i + "/lib/python".len()..];
    let slash = after.find('/')?;
    let version = &after[..slash];
    let is_version = !version.is_empty()
        && version
            .trim_end_matches('t')
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.');
    is_version.then(|| &after[slash + 1..])
}

#[cfg(test)]
mod tests {
    use super::module_of_file;

    #[test]
    fn module_names_come_from_the_path() {
        let cases = [
            (
                "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
                "torch.nn.modules.linear",
            ),
            ("/usr/lib/python3/dist-packages/numpy/__init__.py", "numpy"),
            ("/usr/lib/python3.12/threading.py", "threading"),
            (
                "/root/.pyenv/versions/3.13.0t/lib/python3.13t/json/decoder.py",
                "json.decoder",
            ),
            ("/work/train.py", "train"),
            ("train.py", "train"),
            ("<string>", ""),
            ("<frozen importlib._bootstrap>", "importlib._bootstrap"),
        ];
        for (file, module) in cases {
            assert_eq!(module_of_file(file), module, "{file}");
        }
    }
}
