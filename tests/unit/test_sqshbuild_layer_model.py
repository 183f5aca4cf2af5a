"""Property test of the layer applier against a small reference model of the OCI layer
rules (image-spec layer.md): whiteouts, opaque directories, hard links, symlinks, type
changes, paths below a lower layer's symlink. Random layer stacks: the merged tree, in the
directory pipeline and in the tar-stream pipeline, equals the model's, and nothing is ever
written outside the root."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from squall.errors import SquallError
from squall.sqshbuild.unpack import DirSink, Layer, TarSink, merge_layers

Node = tuple[str, str]  # ("dir", "") | ("file", content) | ("symlink", target)
Op = tuple[str, str, str]  # (kind, path, arg)

NAMES = ["a", "b", "c"]
PATHS = [p for p in NAMES] + [f"{p}/{q}" for p in NAMES for q in NAMES]
TARGETS = ["a", "b", "/a", "../a", "../../../../x", "/etc", "c/b"]

op = st.one_of(
    st.tuples(st.just("file"), st.sampled_from(PATHS), st.sampled_from(["1", "22", "333"])),
    st.tuples(st.just("dir"), st.sampled_from(PATHS), st.just("")),
    st.tuples(st.just("symlink"), st.sampled_from(PATHS), st.sampled_from(TARGETS)),
    st.tuples(st.just("whiteout"), st.sampled_from(PATHS), st.just("")),
    st.tuples(st.just("opaque"), st.sampled_from(NAMES), st.just("")),
    st.tuples(st.just("hardlink"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
)
stacks = st.lists(st.lists(op, max_size=6), min_size=1, max_size=4)


def _below(tree: dict[str, Node], path: str) -> list[str]:
    return [p for p in tree if p == path or p.startswith(path + "/")]


DANGLING: list[str] = []


def model(stack: list[list[Op]]) -> dict[str, Node] | None:
    """The merged tree, bottom layer first; None when a layer writes through a non-directory
    it made itself (the applier refuses those layers)."""
    tree: dict[str, Node] = {}
    for layer in map(expand, stack):
        _hide_lower(tree, layer)
        if not _LayerModel(tree, layer).apply():
            return None
    return tree


def _hide_lower(tree: dict[str, Node], layer: list[Op]) -> None:
    """Whiteouts and opaque directories hide the lower layers only."""
    for kind, path, _ in layer:
        if kind == "whiteout":
            for p in _below(tree, path):
                del tree[p]
        elif kind == "opaque":
            for p in _below(tree, path):
                if p != path:
                    del tree[p]


class _LayerModel:
    """One layer's entries applied to the tree below it, in the layer's order."""

    def __init__(self, tree: dict[str, Node], layer: list[Op]) -> None:
        self.tree = tree
        self.layer = layer
        self.seen: dict[str, str] = {}
        # what a hard link of this layer may link: files and symlinks (link(2) links a
        # symlink itself), the first entry of a path if it comes later in the layer
        self.files: dict[str, Node] = {}
        self.later: dict[str, Node] = {
            path: (kind, arg) for kind, path, arg in reversed(layer)
            if kind in ("file", "symlink")}

    def apply(self) -> bool:
        """False when the applier refuses the layer."""
        for kind, path, arg in self.layer:
            if kind in ("whiteout", "opaque"):
                parent = path if kind == "opaque" else path.rpartition("/")[0]
                if parent and self.seen.get(parent, "dir") != "dir":
                    return False
                continue
            if not self._place(kind, path, arg):
                return False
        return True

    def _place(self, kind: str, path: str, arg: str) -> bool:
        parts = path.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(self.seen.get(anc, "dir") != "dir" for anc in ancestors):
            return False       # written through a non-directory of the same layer
        if path in self.seen:
            return True        # first entry wins
        if kind != "dir" and any(p.startswith(path + "/") for p in self.seen):
            return False       # made a non-directory after writing below it
        self.seen[path] = kind
        for anc in ancestors:
            if self.tree.get(anc, ("dir", ""))[0] != "dir":
                self.tree[anc] = ("dir", "")
            self.tree.setdefault(anc, ("dir", ""))
        if kind == "dir":
            if self.tree.get(path, ("dir", ""))[0] != "dir":
                del self.tree[path]
            self.tree.setdefault(path, ("dir", ""))
            return True
        node = self._link_target(arg) if kind == "hardlink" else (kind, arg)
        if node is None:
            DANGLING.append(path)   # refused if it is kept
            self.seen.pop(path)
            for p in _below(self.tree, path):   # a non-directory all the same
                del self.tree[p]
            return True
        for p in _below(self.tree, path):
            del self.tree[p]
        self.tree[path] = node
        if node[0] in ("file", "symlink"):
            self.files[path] = node
        return True

    def _link_target(self, arg: str) -> Node | None:
        """What a hard link to arg links; the target may come later in the same layer
        (links are resolved at the end). None: nothing a hard link can link."""
        linked = self.files.get(arg, self.later.get(arg))
        if linked is not None:
            return linked
        node = self.tree.get(arg)
        if node is None or node[0] not in ("file", "symlink"):
            return None
        return node


def expand(layer: list[Op]) -> list[Op]:
    """The layer as its tar has it: each entry's parent directories first (docker's layer
    tars carry them), unless the layer makes that path a non-directory itself."""
    out: list[Op] = []
    made: set[str] = set()
    for kind, path, arg in layer:
        parts = path.split("/")
        for i in range(1, len(parts) + (kind == "opaque")):
            anc = "/".join(parts[:i])
            if anc not in made and not any(k not in ("dir", "whiteout", "opaque") and p == anc
                                           for k, p, _ in layer):
                made.add(anc)
                out.append(("dir", anc, ""))
        out.append((kind, path, arg))
    return out


def tar_of(layer: list[Op], parents: bool = True) -> bytes:
    """The layer's tar; ``parents`` False: no entries for parent directories (tars made by
    other tools imply them; the model is the same)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, path, arg in (expand(layer) if parents else layer):
            name = path
            if kind == "whiteout":
                d, _, b = path.rpartition("/")
                name = f"{d}/.wh.{b}" if d else f".wh.{b}"
            elif kind == "opaque":
                name = f"{path}/.wh..wh..opq"
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            data = None
            if kind == "file":
                data = arg.encode()
                info.size = len(data)
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, arg
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, arg
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def read_dir(root: Path) -> dict[str, Node]:
    out: dict[str, Node] = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = ("symlink", os.readlink(full))
            elif os.path.isdir(full):
                out[rel] = ("dir", "")
            else:
                out[rel] = ("file", Path(full).read_text())
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
    return out


def read_tar(data: bytes) -> dict[str, Node]:
    out: dict[str, Node] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        content = {}
        for m in members:
            if m.isfile():
                f = tar.extractfile(m)
                content[m.name] = f.read().decode() if f else ""
        for m in members:
            if m.isdir():
                out[m.name] = ("dir", "")
            elif m.issym():
                out[m.name] = ("symlink", m.linkname)
            elif m.islnk():
                out[m.name] = ("file", content[m.linkname])
            else:
                out[m.name] = ("file", content[m.name])
            for i in range(1, len(m.name.split("/"))):   # tar2sqfs makes parents implicitly
                out.setdefault("/".join(m.name.split("/")[:i]), ("dir", ""))
    return out


def _layers(stack: list[list[Op]], streamed: bool, where: Path,
            parents: bool = True) -> list[Layer]:
    out = []
    for i, layer in enumerate(stack):
        data = tar_of(layer, parents)
        if streamed:
            out.append(Layer(f"sha256:{i:064d}", (lambda d=data: io.BytesIO(d))))
        else:
            p = where / f"layer{i}.tar"
            p.write_bytes(data)
            out.append(Layer(f"sha256:{i:064d}", path=p))
    return out


def check(stack: list[list[Op]], work: Path) -> None:
    DANGLING.clear()
    want = model(stack)
    for streamed, parents in ((True, True), (False, True), (True, False)):
        where = work / f"{'s' if streamed else 'f'}{'p' if parents else 'n'}"
        where.mkdir(parents=True)
        root = where / "deep/er/root"
        try:
            merge_layers(_layers(stack, streamed, where, parents), DirSink(root),
                         ensure_dirs=["/a/b/w"])
        except SquallError:
            assume(want is None or DANGLING)
            return
        assert want is not None, "the applier took a layer the model refuses"
        outside = {p.name for p in where.iterdir()} | {p.name for p in (where / "deep").iterdir()}
        assert outside <= {"deep", "er", *[f"layer{i}.tar" for i in range(len(stack))]}
        assert not (work.parent / "x").exists()
        got = read_dir(root)
        got_minus_workdir = {k: v for k, v in got.items() if k not in want and v[0] == "dir"}
        assert {k: v for k, v in got.items() if k not in got_minus_workdir} == want
        buf = io.BytesIO()
        merge_layers(_layers(stack, streamed, where, parents), TarSink(buf))
        assert read_tar(buf.getvalue()) == want


@settings(max_examples=1000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.filter_too_much])
@given(stack=stacks)
@example(stack=[[("file", "a", "1"), ("hardlink", "b", "a")], [("file", "a", "22")]])
@example(stack=[[("symlink", "a", "/etc")], [("file", "a/b", "1")]])
@example(stack=[[("hardlink", "c", "b", ), ("file", "b", "1")]])
# a link to a lower layer's file keeps that file's content when a layer above replaces it,
# also through a link of a layer between; a link to a name no file had at its layer dangles
@example(stack=[[("file", "b", "1")], [("hardlink", "c", "b")], [("file", "b", "22")]])
@example(stack=[[("file", "b", "1")], [("hardlink", "c", "b")],
                [("file", "b", "22"), ("hardlink", "a/c", "c")]])
@example(stack=[[("file", "b", "1")], [("whiteout", "b", ""), ("hardlink", "c", "b")]])
@example(stack=[[("hardlink", "c", "b")], [("file", "b", "1")]])
# a file between hides the lower directory's entries though a layer above makes it a directory
@example(stack=[[("file", "a/a", "1")], [("file", "a", "1")], [("dir", "a", "")]])
@example(stack=[[("file", "c/b", "1")], [("hardlink", "c", "a")], [("file", "c/a", "1")]])
# a link to a later link of its own layer dangles (tar links names already extracted)
@example(stack=[[("file", "b", "1"), ("hardlink", "c/a", "a/a"), ("hardlink", "a/a", "b")]])
# a parent only implied by its child's name stays when the child is whited out above
@example(stack=[[("file", "a/b", "1")], [("whiteout", "a/b", "")]])
@example(stack=[[("dir", "a", ""), ("file", "a/b", "1")],
                [("opaque", "a", ""), ("file", "a/c", "1")]])
def test_applier_matches_the_model(stack, tmp_path_factory):
    check(stack, tmp_path_factory.mktemp("m"))
