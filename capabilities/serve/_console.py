"""The operator console: one HTML page, its script and its style, served by the app (no build
step). The page holds the token an operator pastes in memory (or the tab's ``sessionStorage``),
sends it as a bearer token, and calls the same API as any client."""

from __future__ import annotations

from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

__all__ = ["CONSOLE_FILES", "console_routes"]

#: The console's files: path under the app → (file in ``static``, media type).
CONSOLE_FILES: Final = {
    "/console": ("console.html", "text/html; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}

#: Only the console's own files run: no inline script, no other origin, no framing.
_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def console_routes() -> list[BaseRoute]:
    """The routes serving the console's files."""
    routes: list[BaseRoute] = []
    for path, (name, media) in CONSOLE_FILES.items():
        body = _read(name)

        async def serve(request: Request, body: bytes = body, media: str = media) -> Response:
            return Response(
                body,
                media_type=media,
                headers={
                    "Content-Security-Policy": _POLICY,
                    "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer",
                    "Cache-Control": "no-cache",
                },
            )

        routes.append(Route(path, serve, methods=["GET"]))
    return routes
