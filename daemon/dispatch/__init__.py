"""A request's way to its effect: the router and method table, tokens, the
ward guard, the workers and the writer units of attempts and management
methods (contract §3.1-§3.4)."""
