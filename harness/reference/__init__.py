"""The built-in system under test: the reference listener, allocator, client and their variants."""
