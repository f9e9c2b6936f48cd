"""The three narrative contexts that can dress the same dependency graph.

Each context is a three-level hierarchy, as in GSM-Infinite: places (a zoo, a
school, a festival) hold items (lions, physics teachers, zombie movies), and every
item belongs to one category (mammals, science teachers, horror movies). An
*instance* quantity counts an item in a place; an *abstract* quantity totals a
category in a place. Every name has a full spelling (paper-like) and a compact
one (fewer, shorter words, for the CPU-sized toy profile).

Knowing which items make up a category is the context's "atomic primitive": a
model that never saw context B cannot know that algebra teachers are math
teachers, which is what the transfer experiment (finding 2) is about.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    """One name in both spellings."""

    full: str
    compact: str

    def spelled(self, style: str) -> str:
        return self.full if style == "full" else self.compact


@dataclass(frozen=True)
class Category:
    name: Name
    items: tuple[Name, ...]


@dataclass(frozen=True)
class Context:
    id: str
    long_name: str
    places: tuple[Name, ...]
    categories: tuple[Category, ...]


def _places(stems: str, suffix: str) -> tuple[Name, ...]:
    return tuple(Name(f"{stem} {suffix}", stem) for stem in stems.split())


def _category(full: str, compact: str, item_full: str, item_compact: str, words: str) -> Category:
    """Items are ``item_full``/``item_compact`` with ``{}`` replaced by each of ``words``."""
    items = tuple(Name(item_full.format(w), item_compact.format(w)) for w in words.split())
    return Category(Name(full, compact), items)


_ZOO = Context(
    id="A",
    long_name="animals-zoo",
    places=_places("Maple Oak Cedar Willow Pine Birch Aspen Elm Spruce Hazel Juniper Laurel "
                   "Magnolia Poplar Rowan Sequoia Cypress Alder Holly Linden", "Zoo"),
    categories=(
        _category("adult mammals", "mammals", "adult {}", "{}",
                  "lions tigers zebras bears wolves foxes giraffes elephants"),
        _category("adult birds", "birds", "adult {}", "{}",
                  "owls eagles parrots penguins flamingos hawks swans crows"),
        _category("adult reptiles", "reptiles", "adult {}", "{}",
                  "snakes lizards turtles crocodiles iguanas geckos tortoises chameleons"),
        _category("adult fish", "fish", "adult {}", "{}",
                  "sharks salmon trout tunas eels rays carps cods"),
        _category("adult insects", "insects", "adult {}", "{}",
                  "bees ants beetles moths wasps crickets dragonflies butterflies"),
    ),
)

_SCHOOL = Context(
    id="B",
    long_name="teachers-school",
    places=_places("Riverside Hillcrest Lakeview Brookfield Fairview Greenwood Westwood Oakridge "
                   "Sunnydale Clearwater Springfield Ridgemont Bayside Northgate Eastwood Kingsley "
                   "Ashford Millbrook Stonebridge Woodland", "High School"),
    categories=(
        _category("science teachers", "science teachers", "{} teachers", "{} teachers",
                  "physics chemistry biology geology astronomy ecology botany zoology"),
        _category("math teachers", "math teachers", "{} teachers", "{} teachers",
                  "algebra geometry calculus statistics trigonometry arithmetic logic probability"),
        _category("language teachers", "language teachers", "{} teachers", "{} teachers",
                  "French Spanish German Latin Japanese Chinese Italian Greek"),
        _category("arts teachers", "arts teachers", "{} teachers", "{} teachers",
                  "music painting drama dance sculpture photography pottery film"),
        _category("sports teachers", "sports teachers", "{} teachers", "{} teachers",
                  "tennis swimming soccer basketball hockey volleyball rugby fencing"),
    ),
)

_FESTIVAL = Context(
    id="C",
    long_name="movie-festival",
    places=_places("Sunset Harbor Silverlake Goldcoast Moonlight Starfield Bluewater Redwood "
                   "Crystal Aurora Horizon Summit Meadow Canyon Lighthouse Ember Prairie "
                   "Tidewater Glacier Orchard", "Film Festival"),
    categories=(
        _category("comedy movies", "comedies", "{} comedy movies", "{} comedies",
                  "romantic dark slapstick satire parody teen buddy office"),
        _category("drama movies", "dramas", "{} drama movies", "{} dramas",
                  "legal war family period medical courtroom political prison"),
        _category("action movies", "action movies", "{} action movies", "{} movies",
                  "spy heist disaster superhero samurai pirate ninja cowboy"),
        _category("horror movies", "horror movies", "{} horror movies", "{} films",
                  "zombie vampire ghost slasher monster witch werewolf alien"),
        _category("documentary movies", "documentaries", "{} documentary movies", "{} documentaries",
                  "nature music history science travel food space ocean"),
    ),
)

CONTEXTS: dict[str, Context] = {c.id: c for c in (_ZOO, _SCHOOL, _FESTIVAL)}
"""The contexts by id: ``"A"`` animals-zoo, ``"B"`` teachers-school, ``"C"`` movie-festival."""

_ALIASES = {c.long_name: c.id for c in CONTEXTS.values()}


def context_id(name: str) -> str:
    """The canonical id ("A", "B", "C") for an id or a long name; ValueError otherwise."""
    if name in CONTEXTS:
        return name
    if name in _ALIASES:
        return _ALIASES[name]
    known = ", ".join([*CONTEXTS, *_ALIASES])
    raise ValueError(f"unknown context {name!r}: use one of {known}")


def get_context(name: str) -> Context:
    return CONTEXTS[context_id(name)]
