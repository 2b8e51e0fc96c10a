"""The prompt sets a sweep runs over: small, written for this project, each made to show a different effect.

- stories: open-ended starts, where sampling knobs change diversity and repetition;
- facts: short questions with one right answer, where greedy is hard to beat;
- grounded: copy, summarise or extract from a passage given in the prompt, where prompt lookup finds drafts;
- repeating: stories whose last sentences already repeat themselves, which a small model continues by copying
  them again: what the penalties against repetition (DRY, the repetition penalty, n-gram bans) are for.
"""

from __future__ import annotations

from dataclasses import dataclass

from playground.errors import PlaygroundError

MAX_PROMPTS = 32  # a longer pasted list is refused, with the count


@dataclass(frozen=True)
class PromptSet:
    name: str
    about: str
    prompts: tuple[str, ...]


_PASSAGE = ("The lighthouse on Gull Point was built in 1871 from granite cut on the island. Its lamp burned "
            "whale oil until 1890, kerosene until 1923, and has been electric since. The keeper's cottage became "
            "a museum in 1968; it opens from May to September, and the climb to the lamp room is 94 steps.")

SETS: dict[str, PromptSet] = {s.name: s for s in (
    PromptSet("stories", "open-ended story starts: diversity and repetition move with the sampling knobs", (
        "Write a short story that begins: The last train out of the valley left without its driver.",
        "Continue the story: When the baker opened the oven, the bread was singing.",
        "Tell a story about a robot that learns to paint with mud.",
        "Write the opening of a story set in a city where it has not rained for ten years.",
        "Continue the story: The letter had been under the floorboards for a hundred years.",
        "Tell a story about two neighbours who only talk through notes left on a fence.",
        "Write a story that begins: Nobody in the village could remember who planted the orchard.",
        "Continue the story: The map was wrong, and that was the best thing that happened to us.",
    )),
    PromptSet("facts", "short questions with one right answer", (
        "What is the capital of Japan?",
        "How many legs does a spider have?",
        "What gas do plants take in from the air to make sugar?",
        "Which planet is closest to the Sun?",
        "What is the boiling point of water at sea level in degrees Celsius?",
        "Who wrote the play Romeo and Juliet?",
        "What is the largest ocean on Earth?",
        "How many minutes are there in three hours?",
    )),
    PromptSet("grounded", "copy, summarise or extract from a passage in the prompt: prompt lookup pays off", (
        f"Repeat this passage word for word: {_PASSAGE}",
        f"Passage: {_PASSAGE}\nList every year mentioned in the passage, each with what happened then.",
        f"Passage: {_PASSAGE}\nSummarise the passage in two sentences.",
        f"Passage: {_PASSAGE}\nWhat did the lamp burn before it was electric? Quote the passage.",
        f"Passage: {_PASSAGE}\nRewrite the passage as a bulleted list of facts.",
        f"Passage: {_PASSAGE}\nWhen is the museum open, and how many steps lead to the lamp room?",
        "Copy this list, then sort it alphabetically: pear, fig, apple, mango, cherry, banana, kiwi, lime.",
        "Copy this sentence three times: The quick brown fox jumps over the lazy dog.",
    )),
    PromptSet("repeating", "stories that repeat a sentence: penalties against repetition break the loop", (
        "The story so far: the keeper climbed the stairs, lit the lamp, and watched the sea. The next night the "
        "keeper climbed the stairs, lit the lamp, and watched the sea. The night after that",
        "Every evening the baker opened the oven, took out the bread, and listened to it sing. The next evening the "
        "baker opened the oven, took out the bread, and listened to it sing. The evening after that",
        "The robot walked to the river, filled its bucket with mud, and painted the wall. The next morning the robot "
        "walked to the river, filled its bucket with mud, and painted the wall. The morning after that",
        "Every morning the fisherman rowed past the rocks, cast his net, and sang to the gulls. The next morning the "
        "fisherman rowed past the rocks, cast his net, and sang to the gulls. The morning after that",
        "Every day the girl opened the gate, fed the goats, and counted the clouds. The next day the girl opened the "
        "gate, fed the goats, and counted the clouds. The day after that",
        "At midnight the old clock struck twelve, the dog barked twice, and the lights went out. The next night the "
        "old clock struck twelve, the dog barked twice, and the lights went out. The night after that",
        "The gardener watered the roses, pulled the weeds, and locked the shed. The next evening the gardener "
        "watered the roses, pulled the weeds, and locked the shed. The evening after that",
        "Every day the postman knocked three times, left a parcel, and walked away whistling. The next day the "
        "postman knocked three times, left a parcel, and walked away whistling. The day after that",
    )),
)}


def prompt_set(name: str) -> tuple[str, ...]:
    """A shipped set's prompts; an unknown name is refused with the names there are."""
    if name not in SETS:
        raise PlaygroundError(f"unknown prompt set {name!r}; the sets are {', '.join(SETS)}")
    return SETS[name].prompts


def pasted_prompts(text: str) -> tuple[str, ...]:
    """One prompt per non-empty line; at least one, at most MAX_PROMPTS."""
    prompts = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not prompts:
        raise PlaygroundError("no prompts given: write one prompt per line")
    if len(prompts) > MAX_PROMPTS:
        raise PlaygroundError(f"{len(prompts)} prompts given; a sweep takes at most {MAX_PROMPTS}")
    return prompts
