//! The harness's git servers as the tests reach them. The repositories
//! themselves are made with [`crate::gitserve`]; this is only the shared way
//! to find the servers.

use crate::gitserve::Endpoints;
use crate::harness::Harness;

/// The git daemon, smart HTTP and SSH endpoints of the running harness, read
/// from its env file. A harness without them cannot run any git test, so this
/// panics with the reason rather than let each test say it again.
pub fn endpoints(harness: &Harness) -> Endpoints {
    Endpoints::from_env_file(harness).expect("git endpoints in the harness env file")
}
