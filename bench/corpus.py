"""Realistic synthetic memories and questions for the latency and scale benchmarks.

A companion's memories of a user's life: 1-3 sentences and 10-40 words each, about people,
places, activities, food, work and plans, with dates and numbers in the text. About 20 memories
share a session; timestamps spread over ~2 years and grow with the memory's position. Questions
are built from the same vocabulary with their own templates, so they are not copies of memories.
Everything is a pure function of (count, seed): the same call gives the same items everywhere.

    python bench/corpus.py --count 5 --seed 0            # memories as JSONL (for secretary ingest)
    python bench/corpus.py --queries 5                   # questions, one per line
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any


def _words(text: str) -> list[str]:
    return text.split()


START = datetime(2023, 1, 1, 8, 0, tzinfo=UTC)
SPAN_DAYS = 730
SESSION_MEAN = 20
MIN_WORDS, MAX_WORDS = 10, 40
EXTERNAL_PREFIX = "bench-"

FIRST_NAMES = _words("""
Maya Liam Noah Emma Olivia Ava Sophia Isabella Mia Amelia Harper Evelyn Abigail Ella Elijah
James Lucas Mason Ethan Logan Jacob Aiden Jackson Sebastian Mateo Henry Owen Wyatt Leo Julian
Grace Chloe Zoe Nora Lily Hannah Aria Layla Riley Scarlett Priya Arjun Ravi Ananya Kiran Mei
Hiroshi Yuki Kenji Sakura Wei Jun Min-jun Seo-yeon Omar Fatima Yusuf Layla Amir Leila Tariq
Sofia Diego Camila Mateus Lucia Pablo Valentina Andres Carmen Javier Ingrid Lars Astrid Freya
Bjorn Katya Dmitri Anya Pavel Irina Chidi Amara Kwame Zainab Tunde Nia Kofi Adaeze Malik Imani
Rosa Marco Giulia Luca Chiara Pierre Camille Louis Margot Hugo Greta Felix Jonas Lena Ines
Tomas Eva Milan Petra Daniel Sarah Rachel Ben Sam Alex Jordan Taylor Casey Morgan Jamie Robin
""")
LAST_NAMES = _words("""
Smith Johnson Garcia Miller Davis Rodriguez Martinez Hernandez Lopez Wilson Anderson Thomas
Moore Jackson Martin Lee Thompson White Harris Clark Lewis Walker Young Allen King Wright Scott
Nguyen Patel Kim Chen Singh Tanaka Sato Suzuki Novak Kowalski Berg Larsen Okafor Mensah Haddad
Rossi Bianchi Dubois Laurent Schmidt Weber Fischer Costa Silva Santos Ivanova Petrov Cohen Levi
""")
RELATIONS = _words("""
sister brother mom dad grandmother grandfather aunt uncle cousin niece nephew coworker manager
neighbor roommate landlord therapist dentist trainer mentor boss partner ex-girlfriend
ex-boyfriend best-friend college-friend teammate bandmate
""")
CITIES = _words("""
Lisbon Porto Barcelona Madrid Seville Valencia Paris Lyon Marseille Berlin Munich Hamburg Vienna
Prague Budapest Krakow Warsaw Amsterdam Rotterdam Brussels Copenhagen Stockholm Oslo Helsinki
Reykjavik Dublin Edinburgh London Manchester Bristol Rome Florence Naples Milan Venice Athens
Istanbul Cairo Marrakesh Nairobi Lagos Accra Capetown Tokyo Kyoto Osaka Seoul Busan Taipei
Bangkok Hanoi Singapore Bali Sydney Melbourne Auckland Toronto Montreal Vancouver Seattle Portland
Denver Austin Chicago Boston Brooklyn Philadelphia Atlanta Miami Nashville Oakland Tucson
Mexico-City Oaxaca Bogota Lima Cusco Santiago Mendoza Montevideo Havana
""")
VENUES = [
    "the farmers market", "a tiny ramen bar", "the climbing gym", "the public library",
    "a jazz club downtown", "the botanical garden", "the community pool", "a rooftop bar",
    "the science museum", "a vinyl record shop", "the old cinema on Main Street", "the dog park",
    "a Georgian restaurant", "the night market", "a board game cafe", "the yoga studio",
    "the hardware store", "a bakery near the station", "the art museum", "the lake trail",
    "the concert hall", "a karaoke place", "the pottery studio", "the bike shop",
    "a taco truck", "the coworking space", "the hospital", "the vet clinic", "the beach",
    "a wine bar", "the bookstore on Fifth", "the ice rink", "the bowling alley",
    "a dim sum place", "the airport lounge", "the train station", "the university campus",
    "a thrift store", "the garden center", "the escape room", "a small Ethiopian restaurant",
]  # fmt: skip
# (past-tense phrase, gerund, tag)
ACTIVITIES = [
    ("went hiking", "hiking", "outdoors"),
    ("went bouldering", "bouldering", "sport"),
    ("ran a half marathon", "running", "sport"),
    ("played tennis", "tennis", "sport"),
    ("went swimming", "swimming", "sport"),
    ("did a pottery class", "pottery", "hobby"),
    ("baked sourdough", "baking", "cooking"),
    ("cooked a curry", "cooking", "cooking"),
    ("went to a concert", "concerts", "music"),
    ("practiced the guitar", "guitar", "music"),
    ("played chess online", "chess", "hobby"),
    ("went birdwatching", "birdwatching", "outdoors"),
    ("painted with watercolors", "painting", "hobby"),
    ("went camping", "camping", "outdoors"),
    ("took a salsa lesson", "dancing", "hobby"),
    ("went kayaking", "kayaking", "outdoors"),
    ("did a long bike ride", "cycling", "sport"),
    ("played board games", "board games", "social"),
    ("went to a book club", "reading", "social"),
    ("volunteered at the shelter", "volunteering", "social"),
    ("went skiing", "skiing", "sport"),
    ("studied Spanish", "learning Spanish", "learning"),
    ("practiced Japanese", "learning Japanese", "learning"),
    ("went to therapy", "therapy", "health"),
    ("had a physio appointment", "physio", "health"),
    ("went to the dentist", "dentist visits", "health"),
    ("planted tomatoes", "gardening", "home"),
    ("repainted the bedroom", "home repairs", "home"),
    ("fixed the leaking sink", "home repairs", "home"),
    ("went to a wedding", "weddings", "family"),
    ("had a job interview", "job hunting", "work"),
    ("gave a talk at work", "public speaking", "work"),
    ("shipped the new release", "the release", "work"),
    ("had a performance review", "reviews", "work"),
    ("went thrifting", "thrifting", "shopping"),
    ("watched a documentary", "documentaries", "media"),
    ("binge-watched a series", "series", "media"),
    ("went to a comedy show", "comedy", "social"),
    ("meditated for an hour", "meditation", "health"),
    ("took the dog to the vet", "vet visits", "pets"),
]
FOODS = _words("""
ramen sushi tacos pho dumplings paella lasagna risotto falafel shakshuka bibimbap kimchi
pad-thai green-curry biryani dal ceviche empanadas pierogi goulash moussaka souvlaki croissants
sourdough bagels cheesecake tiramisu gelato mochi churros baklava pancakes waffles oatmeal
lentil-soup mushroom-risotto fish-and-chips burritos enchiladas arepas injera jollof-rice
banh-mi laksa tempura udon okonomiyaki bao poke hummus tabbouleh
""")
THINGS = [
    "a used road bike", "noise-cancelling headphones", "a cast-iron pan", "a secondhand piano",
    "a new laptop", "running shoes", "a film camera", "a standing desk", "a houseplant",
    "a sewing machine", "a tent", "a drone", "an e-reader", "a espresso machine", "a telescope",
    "hiking boots", "a rice cooker", "a vintage jacket", "a weighted blanket", "a ukulele",
    "concert tickets", "a train pass", "a gym membership", "a language course", "a sketchbook",
]  # fmt: skip
BOOKS = [
    "Project Hail Mary", "The Overstory", "Circe", "Piranesi", "Klara and the Sun",
    "The Midnight Library", "Sapiens", "Educated", "Dune", "The Name of the Wind", "Normal People",
    "A Little Life", "The Three-Body Problem", "Station Eleven", "Atomic Habits", "Pachinko",
    "The Left Hand of Darkness", "Tomorrow and Tomorrow and Tomorrow", "Braiding Sweetgrass",
]  # fmt: skip
PETS = [
    ("dog", "Biscuit"), ("cat", "Pepper"), ("dog", "Juno"), ("cat", "Miso"),
    ("rabbit", "Clover"), ("dog", "Pretzel"), ("cat", "Noodle"), ("parrot", "Kiwi"),
]  # fmt: skip
PROJECTS = _words("""
migration billing-dashboard mobile-app onboarding-flow data-pipeline search-feature
design-system quarterly-report hiring-plan security-audit customer-portal pricing-page
""")
FEELINGS = [
    "exhausted but happy", "a bit nervous", "really proud", "frustrated", "relieved",
    "overwhelmed", "excited", "calm for once", "homesick", "grateful", "anxious about money",
    "energized", "disappointed", "nostalgic", "surprisingly relaxed",
]  # fmt: skip
PARTS_OF_DAY = ["in the morning", "at lunch", "in the afternoon", "in the evening", "late at night"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]  # fmt: skip
WEATHER = ["it rained the whole time", "the weather was perfect", "it was freezing",
           "it was unbearably hot", "there was fog all morning", "it snowed a little"]  # fmt: skip
TOOLS = [
    "the calendar API", "the web search tool", "the weather tool", "the email tool",
    "the maps tool", "the note-taking tool", "the reminder tool", "the translation tool",
]  # fmt: skip
EXTRA_TAGS = ["important", "follow-up", "personal", "family"]
TYPES = [("event", 0.55), ("fact", 0.15), ("preference", 0.15),
         ("interaction_summary", 0.10), ("tool_experience", 0.05)]  # fmt: skip

Rng = random.Random


def _clean(word: str) -> str:
    return word.replace("-", " ")


def _person(rng: Rng, owner: str) -> str:
    roll = rng.random()
    if roll < 0.55:
        return rng.choice(FIRST_NAMES)
    if roll < 0.8:
        return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    return f"{owner} {_clean(rng.choice(RELATIONS))}"


class _Slots(dict[str, str]):
    """Template values drawn on first use, so a sentence costs only the slots it names."""

    def __init__(
        self, rng: Rng, when: datetime, activity: tuple[str, str, str], owner: str = "their"
    ) -> None:
        super().__init__()
        self._rng = rng
        self._when = when
        self._activity = activity
        self._owner = owner  # "their sister" in a memory, "my sister" in a question

    def __missing__(self, key: str) -> str:
        value = self[key] = self._draw(key)
        return value

    def _draw(self, key: str) -> str:
        rng = self._rng
        if key in ("did", "doing", "tag"):
            return self._activity[("did", "doing", "tag").index(key)]
        if key in ("pet", "pet_name"):
            pet = rng.choice(PETS)
            self["pet"], self["pet_name"] = pet
            return pet[0] if key == "pet" else pet[1]
        if key in ("person", "other"):
            return _person(rng, self._owner)
        if key == "date":
            return f"{MONTHS[self._when.month - 1]} {self._when.day}"
        return _DRAWS[key](rng)


_DRAWS: dict[str, Callable[[Rng], str]] = {
    "name": lambda rng: rng.choice(FIRST_NAMES),
    "relation": lambda rng: _clean(rng.choice(RELATIONS)),
    "city": lambda rng: _clean(rng.choice(CITIES)),
    "venue": lambda rng: rng.choice(VENUES),
    "food": lambda rng: _clean(rng.choice(FOODS)),
    "food2": lambda rng: _clean(rng.choice(FOODS)),
    "thing": lambda rng: rng.choice(THINGS),
    "book": lambda rng: rng.choice(BOOKS),
    "project": lambda rng: _clean(rng.choice(PROJECTS)),
    "feeling": lambda rng: rng.choice(FEELINGS),
    "part": lambda rng: rng.choice(PARTS_OF_DAY),
    "weekday": lambda rng: rng.choice(WEEKDAYS),
    "month": lambda rng: rng.choice(MONTHS),
    "weather": lambda rng: rng.choice(WEATHER),
    "tool": lambda rng: rng.choice(TOOLS),
    "n": lambda rng: str(rng.randint(2, 12)),
    "price": lambda rng: str(rng.choice([12, 18, 25, 40, 60, 85, 120, 250, 400, 900])),
    "km": lambda rng: str(rng.choice([5, 8, 10, 12, 15, 21, 30, 42])),
    "hour": lambda rng: str(rng.randint(6, 11)),
}


# Sentence templates by memory type; a memory opens with one and may add follow-ups.
OPENERS: dict[str, list[str]] = {
    "event": [
        "On {date} the user {did} with {person} near {city}.",
        "The user {did} with {person} {part} and felt {feeling} afterwards.",
        "Met {person} at {venue} in {city} on {weekday} to catch up.",
        "The user and {person} tried {food} at {venue} {part}.",
        "Flew to {city} for {n} days to visit {person}.",
        "The user finally bought {thing} for {price} dollars.",
        "Took {pet_name} the {pet} to {venue} on {weekday}.",
        "Had a long call with {person} about {doing} and plans for {month}.",
        "The user's {relation} {name} came over for dinner and cooked {food}.",
        "Finished reading {book} on the train to {city}.",
        "The user {did} for the first time since {month}.",
        "Presented the {project} work to the team on {weekday} {part}.",
        "Ran {km} km along {venue} before work on {weekday}.",
        "Went to {venue} with {person} and stayed until {hour} pm.",
        "Argued with {person} about money on {date}.",
    ],
    "fact": [
        "The user's {relation} is called {name} and lives in {city}.",
        "{person} works on the {project} project with the user.",
        "The user has a {pet} named {pet_name} who is {n} years old.",
        "The user moved to {city} in {month} for a new job.",
        "{person} is allergic to {food} and avoids it.",
        "The user's birthday is in {month} and {person} always calls that day.",
        "The user's gym is next to {venue} in {city}.",
        "{person} is training for a {km} km race in {month}.",
    ],
    "preference": [
        "The user loves {food} but cannot stand {food2}.",
        "The user prefers {doing} {part} rather than after work.",
        "The user wants book recommendations similar to {book}.",
        "The user likes quiet places such as {venue} when feeling {feeling}.",
        "The user prefers short answers and no reminders on {weekday}.",
        "The user would rather travel to {city} than to {other}'s hometown.",
        "The user enjoys {doing} with {person} more than alone.",
    ],
    "interaction_summary": [
        "Talked with the user about {doing} and how {person} is doing.",
        "The user asked for help planning a trip to {city} in {month}.",
        "Helped the user draft a message to {person} about {project}.",
        "The user vented about the {project} deadline and felt {feeling}.",
        "Discussed a budget of {price} dollars for {thing}.",
    ],
    "tool_experience": [
        "Using {tool} to book {venue} failed twice before it worked.",
        "{tool} returned the wrong city for {city} until the country was added.",
        "The user liked that {tool} set a reminder for {weekday} at {hour} am.",
    ],
}
FOLLOW_UPS = [
    "{weather}.",
    "The user said they felt {feeling}.",
    "{person} recommended {book} afterwards.",
    "They want to go back in {month}.",
    "It cost about {price} dollars in total.",
    "{person} joined them later with {other}.",
    "They ate {food} on the way home.",
    "The user plans to do it again with {person} next {weekday}.",
    "It took {n} hours including the trip back.",
    "The user mentioned that {pet_name} was sick again.",
    "Afterwards they talked about the {project} project.",
    "The user worries about {doing} taking too much time.",
]

QUESTIONS = [
    "When did I last go {doing} with {person}?",
    "What did {person} recommend I read?",
    "Where did I eat {food} in {city}?",
    "Who came with me to {venue}?",
    "How did the trip to {city} go?",
    "What do I think about {food}?",
    "How much did {thing} cost?",
    "What is my {relation}'s name?",
    "Did I ever try {doing} in {month}?",
    "What happened with the {project} project at work?",
    "How is {pet_name} the {pet} doing?",
    "Who is training for a race?",
    "What did we talk about regarding {doing}?",
    "Which restaurant did I go to with {person}?",
    "Where does my {relation} live?",
    "What went wrong with {tool}?",
    "What am I allergic to, or is that {person}?",
    "When is my birthday and who calls me?",
    "What did I do on {weekday} {part}?",
    "How was I feeling after {doing} last {month}?",
    "Any plans to visit {person} in {city}?",
    "What books like {book} would I enjoy?",
    "Who did I see in {city} around {month}?",
    "What did I buy for about {price} dollars?",
    "Did I mention {doing} at {venue}?",
    "What was the weather like when I went to {venue}?",
    "Did {person} ever meet {other}?",
    "What did I cook for my {relation}?",
]


def _sentence(template: str, slots: _Slots) -> str:
    text = template.format_map(slots)
    return text[0].upper() + text[1:]


def _content(rng: Rng, kind: str, when: datetime, activity: tuple[str, str, str]) -> str:
    """Return 1-3 sentences of 10-40 words opening with a template of ``kind``.

    The opener fixes the activity; follow-ups draw their other values afresh.
    """
    wanted = rng.choices((1, 2, 3), weights=(0.35, 0.4, 0.25))[0]
    sentences = [_sentence(rng.choice(OPENERS[kind]), _Slots(rng, when, activity))]
    words = len(sentences[0].split())
    for template in rng.sample(FOLLOW_UPS, k=len(FOLLOW_UPS)):
        if len(sentences) >= wanted and words >= MIN_WORDS:
            break
        candidate = _sentence(template, _Slots(rng, when, activity))
        if words + len(candidate.split()) <= MAX_WORDS:
            sentences.append(candidate)
            words += len(candidate.split())
    return " ".join(sentences)


def _session_sizes(count: int, rng: Rng) -> Iterator[int]:
    left = count
    while left > 0:
        size = min(left, max(1, round(rng.gauss(SESSION_MEAN, 6))))
        yield size
        left -= size


def memories(
    count: int, *, seed: int = 0, start: datetime = START, span_days: float = SPAN_DAYS
) -> Iterator[dict[str, Any]]:
    """Yield ``count`` memories (MemoryIn-shaped dicts) in time order, deterministic in seed.

    Sessions of ~20 memories start evenly over ``span_days`` (with jitter); within a session
    memories are minutes apart. ``external_id`` is ``bench-<position>``.
    """
    rng = random.Random(f"memories:{seed}:{count}")
    sessions = math.ceil(count / SESSION_MEAN)
    gap = timedelta(days=span_days) / max(1, sessions)
    # Memories within a session are a few minutes apart, but never spill into the next session.
    step_cap = gap / (4 * SESSION_MEAN)
    kinds = [name for name, _ in TYPES]
    weights = [weight for _, weight in TYPES]
    position = 0
    for number, size in enumerate(_session_sizes(count, rng)):
        when = start + gap * number + gap * rng.uniform(0, 0.4)
        session_id = f"bench-s{number}"
        for _ in range(size):
            when += min(timedelta(minutes=rng.uniform(1, 15)), step_cap)
            kind = rng.choices(kinds, weights=weights)[0]
            activity = rng.choice(ACTIVITIES)
            tags = [activity[2], *rng.sample(EXTRA_TAGS, k=rng.randint(0, 1))]
            yield {
                "content": _content(rng, kind, when, activity),
                "type": kind,
                "timestamp": when.isoformat().replace("+00:00", "Z"),
                "tags": tags,
                "importance": rng.choices(range(1, 11), weights=(2, 4, 6, 8, 10, 8, 6, 3, 2, 1))[0],
                "metadata": {"channel": rng.choice(("chat", "voice", "import"))},
                "external_id": f"{EXTERNAL_PREFIX}{position}",
                "session_id": session_id,
            }
            position += 1


def queries(count: int = 200, *, seed: int = 1) -> list[str]:
    """Return ``count`` distinct natural questions over the memories' vocabulary.

    Deterministic in seed. Raise ValueError if the templates cannot give that many.
    """
    rng = random.Random(f"queries:{seed}")
    when = START + timedelta(days=SPAN_DAYS // 2)
    found: dict[str, None] = {}
    for _ in range(count * 20):
        if len(found) == count:
            return list(found)
        activity = rng.choice(ACTIVITIES)
        found[_sentence(rng.choice(QUESTIONS), _Slots(rng, when, activity, "my"))] = None
    raise ValueError(f"could not generate {count} distinct questions")


def texts(count: int, *, seed: int = 7) -> list[str]:
    """Return ``count`` memory-like texts (whole memories and first sentences), for a pool."""
    out: list[str] = []
    for item in memories(count, seed=seed):
        content = item["content"]
        first = content.split(". ")[0]
        out.append(content if len(out) % 2 == 0 else first)
    return out


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20, help="memories to print (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    parser.add_argument("--queries", type=int, default=0, help="print this many questions instead")
    args = parser.parse_args(argv)
    emit: Callable[[str], object] = sys.stdout.write
    if args.queries:
        for question in queries(args.queries, seed=args.seed or 1):
            emit(question + "\n")
        return 0
    for item in memories(args.count, seed=args.seed):
        emit(json.dumps(item, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
