//! How long requests lived, from allocation to free.

use super::histogram::render;
use super::{Chart, Scope, Svg, Target};

pub struct RequestLifetimes;

impl Chart for RequestLifetimes {
    fn name(&self) -> &'static str {
        "request-lifetimes"
    }
    fn caption(&self) -> &'static str {
        "How long requests lived, from allocation to free. Short-lived requests are what a \
         caching allocator recycles; memory never freed stays until the process ends."
    }
    fn scope(&self) -> Scope {
        Scope::Trace
    }
    fn render(&self, at: &Target) -> Svg {
        render(
            "Request lifetimes (allocation to free)",
            "requests",
            &at.data.lifetimes,
        )
    }
}
