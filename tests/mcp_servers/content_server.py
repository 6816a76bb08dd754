"""An MCP server built with the official SDK, for the catalogue and content tests.

python content_server.py            # stdio

Its tools have pydantic-built schemas (Optional fields, a nested model, an enum, a recursive
model: `$ref`/`$defs` as pydantic emits them) and return what is not plain text: an image,
an embedded resource holding a text blob, and a resource_link. It also serves resources.
"""

from __future__ import annotations

import base64
from enum import Enum

from content_data import NOTE_TEXT, PNG  # noqa: E402  (beside this file)
from mcp.server.mcpserver import MCPServer
from mcp.types import (
    Annotations,
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)
from pydantic import BaseModel, Field


class Priority(str, Enum):
    low = "low"
    high = "high"


class Address(BaseModel):
    street: str = Field(description="Street and number.")
    city: str
    zip_code: str | None = None


class Person(BaseModel):
    name: str = Field(description="Full name, as on the passport.")
    age: int | None = Field(default=None, ge=0, description="Age in years, if known.")
    address: Address
    tags: list[str] = []


class Category(BaseModel):
    title: str
    children: list[Category] = []


def add_person(person: Person, priority: Priority = Priority.low, note: str | None = None) -> str:
    """Store a person."""
    return f"stored {person.name} ({priority.value}); note={note}"


def categorise(root: Category) -> str:
    """Store a category tree."""
    return f"stored {root.title} with {len(root.children)} children"


def screenshot() -> list[ImageContent | TextContent]:
    """A screenshot of the page, with a caption."""
    image = ImageContent(
        type="image",
        data=base64.b64encode(PNG).decode(),
        mime_type="image/png",
        annotations=Annotations(audience=["assistant"], priority=0.9),
    )
    return [TextContent(type="text", text="The login page:"), image]


def attachment() -> list[EmbeddedResource]:
    """A text file, embedded as a base64 blob."""
    blob = BlobResourceContents(
        uri="memo://notes.txt",
        mime_type="text/plain",
        blob=base64.b64encode(NOTE_TEXT.encode()).decode(),
    )
    return [EmbeddedResource(type="resource", resource=blob)]


def find_notes() -> list[ResourceLink]:
    """Where the notes are: a link to a resource."""
    link = ResourceLink(type="resource_link", uri="memo://notes.txt", name="notes.txt",
                        mime_type="text/plain", description="The meeting notes")  # fmt: skip
    return [link]


def build_server() -> MCPServer:
    server = MCPServer("content", log_level="WARNING")
    for tool in (add_person, categorise, screenshot, attachment, find_notes):
        server.tool()(tool)

    @server.resource("memo://notes.txt", name="notes.txt", mime_type="text/plain",
                     description="The meeting notes")  # fmt: skip
    def notes() -> str:
        return NOTE_TEXT

    @server.resource("memo://logo.png", name="logo.png", mime_type="image/png")
    def logo() -> bytes:
        return PNG

    @server.resource("memo://secret.txt", name="secret.txt", mime_type="text/plain")
    def secret() -> str:
        return "token=sk-ant-api03-" + "A" * 40

    return server


if __name__ == "__main__":
    build_server().run()
