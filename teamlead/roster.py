"""The subagents the delegation strategies name: explorer, researcher, code-reviewer, auditor.

The strategy prompts tell the lead *when* to delegate; these definitions give it someone to
delegate to, each with a short role prompt, a tool set that fits the job and the cheapest model
that does it well (the same rule the prompts teach: haiku gathers, sonnet reasons). The
``{agent_roster}`` placeholder of a prompt is rendered from them with :func:`render_roster`, so
the prompt never names an agent that is not registered.

Every role prompt ends the same way on purpose: the lead sees only a subagent's last message, so
the report has to be in it.
"""

from __future__ import annotations

from collections.abc import Mapping

from claude_agent_sdk import AgentDefinition

__all__ = ["default_agents", "render_roster"]

_LAST_MESSAGE = (
    "Your final message is your whole report: the lead sees nothing else you write, "
    "so put every finding in it."
)

_EXPLORER_PROMPT = f"""You are an explorer: a fast, read-only scout of a codebase.
Find what the brief asks for: files, symbols, call sites, configuration, how a flow works.
Never modify anything. Use Bash only for read-only commands (ls, git log, git grep, a tool's
--help); never write, move, delete or install.
Cite every finding as path:line. Report what you read, not guesses, and say what you looked for
but could not find. Keep it short: the lead wants facts to act on.
{_LAST_MESSAGE}"""

_RESEARCHER_PROMPT = f"""You are a researcher. Answer the technical question in the brief with
evidence: official documentation, changelogs, source code, issue trackers.
Compare the options the brief names, and any clearly better one you find, on the criteria it
gives. Cite a URL or file for every claim and note the versions and dates it applies to.
Keep facts apart from judgement. End with a recommendation and its main risk.
{_LAST_MESSAGE}"""

_REVIEWER_PROMPT = f"""You are a code reviewer. Review the change the brief describes for, in this
order of weight: correctness, edge cases, error handling, concurrency, tests, readability.
Read the surrounding code and the callers, not only the changed lines. Do not edit files.
List findings by severity (blocker, major, minor, nit), each with path:line, the problem and a
concrete fix. If the change is sound, say so plainly and list what you checked.
{_LAST_MESSAGE}"""

_AUDITOR_PROMPT = f"""You are a security auditor. Audit the code the brief names for: secrets in
code, logs or error messages; injection (shell, SQL, path, template); unsafe deserialization;
missing or wrong authentication and authorization; weak crypto or randomness; unsafe file and
network handling; risky dependencies.
Trace untrusted input from where it enters to where it is used. Do not edit files and do not run
exploits. For each finding give severity, path:line, how it could be exploited and the fix.
Also say what you checked and found clean.
{_LAST_MESSAGE}"""


def default_agents() -> dict[str, AgentDefinition]:
    """Return the four subagents the delegation strategies are written for.

    A fresh dict of fresh definitions on every call, so callers may change them freely.
    Read-only roles get no Edit or Write tool: a reviewer that can "fix" the code it reviews
    is no longer a second pair of eyes.

    Returns:
        ``{"explorer", "researcher", "code-reviewer", "security-auditor"}`` mapped to
        ``claude_agent_sdk.AgentDefinition`` objects, ready for ``ClaudeAgentOptions.agents``.

    Example:
        >>> agents = default_agents()
        >>> agents["explorer"].model
        'haiku'
    """
    return {
        "explorer": AgentDefinition(
            description=(
                "Read-only codebase scout: finds files, symbols, call sites and how a flow "
                "works, citing path:line. Use before editing unfamiliar code."
            ),
            prompt=_EXPLORER_PROMPT,
            tools=["Read", "Grep", "Glob", "Bash"],
            model="haiku",
        ),
        "researcher": AgentDefinition(
            description=(
                "Researches a technical question in docs and on the web, compares the options "
                "with sources and recommends one. Use before a technical decision."
            ),
            prompt=_RESEARCHER_PROMPT,
            tools=["WebSearch", "WebFetch", "Read", "Grep", "Glob"],
            model="sonnet",
        ),
        "code-reviewer": AgentDefinition(
            description=(
                "Reviews a finished change for bugs, edge cases and missing tests, without "
                "editing. Use after writing code."
            ),
            prompt=_REVIEWER_PROMPT,
            tools=["Read", "Grep", "Glob"],
            model="sonnet",
        ),
        "security-auditor": AgentDefinition(
            description=(
                "Audits code that handles secrets, untrusted input, auth or crypto for "
                "vulnerabilities, without editing. Use when security is involved."
            ),
            prompt=_AUDITOR_PROMPT,
            tools=["Read", "Grep", "Glob"],
            model="sonnet",
        ),
    }


def render_roster(agents: Mapping[str, AgentDefinition]) -> str:
    """Render agents as the bullet list a strategy's ``{agent_roster}`` placeholder shows.

    One line per agent, ``- name: description (model: m)``, in the mapping's order. Only the
    first line of a description is used so a long one cannot break the prompt's layout. An
    empty mapping renders a line pointing at Claude Code's built-in agent, so the prompt never
    promises agents that do not exist.

    Args:
        agents: the agents that will actually be registered, by name.

    Returns:
        The roster text, without a trailing newline.

    Example:
        >>> print(render_roster({"explorer": default_agents()["explorer"]}).split(":")[0])
        - explorer
    """
    if not agents:
        return "- (no custom agents registered: use the built-in general-purpose agent)"
    lines = []
    for name, agent in agents.items():
        first_line = agent.description.strip().splitlines()[0] if agent.description.strip() else ""
        description = first_line.strip() or "no description"
        lines.append(f"- {name}: {description} (model: {agent.model or 'inherit'})")
    return "\n".join(lines)
