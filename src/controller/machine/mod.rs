//! The Machine controller. [`plan`] holds the lifecycle as data: a pure
//! `decide` from (Machine, what was observed, now) to the next steps.

pub mod plan;
