"""``driftbus push DIR oci://REGISTRY/REPO:TAG``: write a directory of manifests to a registry as
an OCI artifact in Flux's format (``flux push artifact``; ``services.inputs.oci.artifact``) and
print its digest — what ``publish --oci …@DIGEST`` and ``source --oci`` then read, and the
revision the bundle will carry. Needs no bus.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from services.cli.inputs import add_oci_access_args, oci_access


def cmd_push(args: argparse.Namespace) -> int:
    from services.cli import table
    from services.inputs import load
    from services.inputs.oci import artifact as oci_artifact
    from services.inputs.oci import reference as oci

    try:
        ref = oci.parse_reference(args.url, need_tag=True)
        if ref.digest:
            raise oci.OciError(f"{args.url}: a digest is what a push makes; give only a tag")
        digest = asyncio.run(
            oci_artifact.push(
                Path(args.directory),
                ref,
                access=oci_access(args),
                source=args.source or "",
                revision=args.revision or "",
            )
        )
    except load.InputError as exc:
        return table.fail("push", exc)
    print(f"pushed {ref.at(digest=digest)}", file=sys.stderr)
    print(digest)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "push",
        help="write a directory of manifests to a registry as an OCI artifact",
        description="Write DIR (its regular files, as a gzipped tarball) to the registry as "
        "an OCI artifact in Flux's format (as `flux push artifact` does) and print the "
        "manifest's digest. `publish --oci URL@DIGEST` and `source --oci` read it back.",
    )
    p.add_argument("directory", metavar="DIR", help="the directory to push")
    p.add_argument("url", metavar="oci://REGISTRY/REPO:TAG", help="where to write it")
    p.add_argument(
        "--source",
        help="where the content comes from, e.g. a Git URL (annotation "
        "org.opencontainers.image.source)",
    )
    p.add_argument(
        "--revision",
        help="which revision of it, e.g. main@sha1:COMMIT (annotation "
        "org.opencontainers.image.revision)",
    )
    add_oci_access_args(p)
    p.set_defaults(func=cmd_push)


def main(argv: list[str] | None = None) -> int:
    """``python -m services.cli.push``: the command on its own (until ``driftbus`` lists it)."""
    parser = argparse.ArgumentParser(prog="driftbus")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["push", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
