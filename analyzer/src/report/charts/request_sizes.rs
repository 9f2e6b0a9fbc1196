//! How many requests of each size there were, and how many bytes they add up to.

use super::histogram::render;
use super::{Chart, Scope, Svg, Target};

pub struct RequestSizes;

impl Chart for RequestSizes {
    fn name(&self) -> &'static str {
        "request-sizes"
    }
    fn caption(&self) -> &'static str {
        "How many requests of each size (left) and how many bytes they add up to (right). \
         Many small requests cost allocator time; a few large ones usually make the peak."
    }
    fn scope(&self) -> Scope {
        Scope::Trace
    }
    fn render(&self, at: &Target) -> Svg {
        render("Request sizes", "requests", &at.data.sizes)
    }
}
