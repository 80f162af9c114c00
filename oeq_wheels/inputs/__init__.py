"""The inputs stage: every pinned file fetched and checked (fetch), torch's and NVIDIA's wheels read member by member
(members), link stubs of the libraries the build links (link_stubs, link_stub_store), the trees the builds read
unpacked once per content (unpack), and each CPython with its headers (pythons)."""
