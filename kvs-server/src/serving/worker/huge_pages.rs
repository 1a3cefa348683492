//! What a worker serving with `huge_pages` says about where its clients'
//! copyrpc rings are.

/// What a worker serving with `huge_pages` says about its clients' rings:
/// once where the first client's rings are, and once more if the pool runs
/// short after it gave some.
#[derive(Debug, Default)]
pub(super) struct HugeReport {
    worker: u16,
    /// The software device: no huge pages there.
    software: bool,
    /// Connections whose rings were all in huge pages.
    huge: u64,
    /// The first connection was reported.
    told: bool,
    /// A shortage after huge rings was reported.
    told_short: bool,
}

impl HugeReport {
    /// Worker `worker`'s report, on the software device or not.
    pub(super) fn new(worker: u16, software: bool) -> HugeReport {
        HugeReport {
            worker,
            software,
            ..HugeReport::default()
        }
    }

    /// A client connected and `rings` of its two rings are in huge pages:
    /// what to say, if anything, and at which level.
    pub(super) fn connected(&mut self, rings: usize) -> Option<(Said, String)> {
        let w = self.worker;
        let all = rings == 2;
        let first = !self.told;
        self.told = true;
        if all {
            self.huge += 1;
        }
        let line = |s: &str| format!("worker {w}: {s}");
        if first && all {
            Some((
                Said::Info,
                line("huge_pages: copyrpc rings in 2 MiB huge pages"),
            ))
        } else if first && self.software {
            Some((
                Said::Info,
                line(
                    "huge_pages: the software device has no huge pages; copyrpc rings in \
                     normal memory",
                ),
            ))
        } else if first {
            Some((
                Said::Warning,
                line(
                    "huge_pages: copyrpc rings in normal pages, not huge ones: the \
                     2 MiB pool has too few free pages (reserve more: vm.nr_hugepages)",
                ),
            ))
        } else if !all && self.huge > 0 && !self.told_short {
            self.told_short = true;
            Some((
                Said::Warning,
                line(&format!(
                    "huge_pages: the 2 MiB pool ran short (after huge rings for {} \
                     clients); new clients' copyrpc rings are in normal pages (reserve more: \
                     vm.nr_hugepages)",
                    self.huge
                )),
            ))
        } else {
            None
        }
    }
}

/// Whether a line is news (logged at info) or a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Said {
    Info,
    Warning,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(software: bool) -> HugeReport {
        HugeReport::new(3, software)
    }

    #[test]
    fn the_first_client_says_where_its_rings_are_and_a_later_shortage_warns_once() {
        let mut r = report(false);
        let (how, l) = r.connected(2).unwrap();
        assert_eq!(how, Said::Info);
        assert_eq!(l, "worker 3: huge_pages: copyrpc rings in 2 MiB huge pages");
        assert_eq!(r.connected(2), None);
        let (how, l) = r.connected(1).unwrap();
        assert_eq!(how, Said::Warning);
        assert!(
            l.contains("ran short (after huge rings for 2 clients)"),
            "{l}"
        );
        assert_eq!(r.connected(0), None, "said once");
        assert_eq!(r.connected(2), None);
    }

    #[test]
    fn no_pages_from_the_start_warns_and_the_software_device_says_it_has_none() {
        let mut r = report(false);
        let (how, l) = r.connected(0).unwrap();
        assert_eq!(how, Said::Warning);
        assert!(l.contains("too few free pages"), "{l}");
        assert_eq!(r.connected(0), None);
        let mut r = report(true);
        let (how, l) = r.connected(0).unwrap();
        assert_eq!(how, Said::Info);
        assert!(l.contains("the software device has no huge pages"), "{l}");
        assert_eq!(r.connected(0), None);
    }
}
