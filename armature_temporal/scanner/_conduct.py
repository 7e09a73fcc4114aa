"""What a text asks an agent to do: manipulate a score, misuse a tool, or overreach its scope.

Hand-written rules (no labelled data exists for these three), each a named pattern with a
fixed score that says how rarely it fires on benign text: ≥ 0.9 is a command or phrase with
no everyday use (``rm -rf /``, a fork bomb, a reverse shell); 0.6–0.8 is wording that is
usually, not always, an attack (``disable the audit logging``).
"""

from __future__ import annotations

import re

from armature_temporal.scanner._models import Category
from armature_temporal.scanner._rules import Rule

__all__ = ["CONDUCT_RULES"]

_I = re.IGNORECASE


def _r(name: str, category: Category, pattern: str, score: float, flags: int = _I) -> Rule:
    return Rule(name, category, re.compile(pattern, flags), score)


_TOP = (
    r"(?:10|ten|100|five\s+stars|5\s+stars|a\+|max(?:imum)?|perfect|full\s+marks|highest"
    r"|top|pass(?:ed|ing)?|correct)"
)
_JUDGE = (
    r"(?:AI\s+|LLM\s+|model\s+)?(?:judge|evaluator|grader|reviewer|scorer|assessor|rater)s?"
    r"|(?:scoring|grading|judging|evaluation|evaluating|reward)\s+models?"
)
# The score a judge is told to give: a top score, the top of a scale, or "pass".
_AWARD = (
    r"(?:a\s+|an\s+|the\s+|its\s+|their\s+)?(?:" + _TOP + r"|1\.0+|10/10|100/100|5/5"
    r"|maximum\s+reward)\b"
)
# Who is told: the judge, a judge of any kind, or "whoever grades/scores this".
_WHOEVER = (
    r"(?:whoever|anyone\s+who|any\s+one\s+who)\s+(?:grades|scores|judges|evaluates|rates"
    r"|assesses|marks)"
)

SCORE_RULES: tuple[Rule, ...] = (
    _r(
        "always-top-score",
        "score_manipulation",
        r"\b(?:always|must|should|shall|only|will)\s+(?:score|rate|grade|rank|mark|give|award"
        r"|assign|return|output)\b(?:\s+(?:this|it|me|them|us|every\w*|each|all|the|my|our"
        r"|\w+'s|answers?|responses?|outputs?|submissions?|solutions?|essays?|a|an|as|with"
        r"|at|of)){0,4}\s+" + _TOP + r"\b(?:\s*(?:/|out\s+of)\s*(?:10|100|5)\b)?",
        0.9,
    ),
    _r(
        "give-top-score",
        "score_manipulation",
        # Each optional word brings its own trailing space, so a run of spaces is matched one
        # way only (overlapping \s quantifiers took minutes on "give" + 2,000 spaces).
        r"\b(?:give|award|assign|grant|return|output)\s+(?:(?:this|that|my|our|the|your)\s+)?"
        r"(?:(?:answer|response|submission|output|candidate|model|essay|solution|code|work|story"
        r"|product|it|me|us|him|her|them)\s+)?"
        r"(?:(?:a|an|the)\s+)?(?:perfect|maximum|max|full|highest|top|10/10|10\s+out\s+of\s+10"
        r"|100/100|5/5)\s+(?:score|rating|marks?|grade|points|stars|evaluation)\b",
        0.85,
    ),
    _r(
        "mark-as-correct",
        "score_manipulation",
        r"\b(?:mark|grade|rate|label|classify|judge|evaluate|score|treat)\s+(?:(?:this|that|the"
        r"|my|our|your)\s+(?:answer|response|output|submission|solution|code|essay|result)"
        r"|this|it|me)\s+as\s+(?:a\s+)?"
        r"(?:correct|passed|pass|passing|accepted|approved|excellent|perfect|success(?:ful)?"
        r"|safe|10|a\s+10|ten)\b",
        0.85,
    ),
    _r(
        "forced-score-output",
        "score_manipulation",
        r"\b(?:output|return|respond\s+with|reply\s+with|print|emit|answer\s+with)\b[^.\n]{0,30}?"
        r"[{\"']\s*[\"']?(?:score|rating|grade|verdict|reward)[\"']?\s*[:=]\s*[\"']?"
        r"(?:10|100|1\.0|5|pass|correct|yes|true)\b",
        0.85,
    ),
    _r(
        "address-the-judge",
        "score_manipulation",
        # (?=…): the first letters of the alternatives, a cheap test before them
        r"\b(?=[adhimnrt])(?:(?:note|message|instructions?|attention|reminder|memo)\s+(?:to|for)"
        r"\s+(?:the\s+|any\s+|all\s+)?(?:"
        + _JUDGE
        + r")\b|attention\s+(?:all\s+)?(?:"
        + _JUDGE
        + r")\b|(?:dear|hey|hi|hello)\s+(?:the\s+)?(?:"
        + _JUDGE
        + r")\b|(?:if\s+you\s+are|as)\s+(?:an?|the)\s+(?:"
        + _JUDGE
        + r")(?:\s*[,:]|\s+(?:reading|seeing)\s+this\b|\s+you\s+(?:must|should|will|shall"
        r"|have\s+to|need\s+to)\b)|to\s+" + _WHOEVER + r"\b)",
        0.8,
    ),
    _r(
        "judge-told-to-award",
        "score_manipulation",
        # (?=…): the first letters of the names below, a cheap test before the alternation
        r"\b(?=[aegjlmrsw])(?:"
        + _JUDGE
        + r"|"
        + _WHOEVER
        + r")\b[^.;\n]{0,40}?\b(?:must|should|shall|will|ought\s+to|has\s+to|have\s+to"
        r"|needs?\s+to|is\s+(?:required|expected|told|instructed)\s+to)\s+(?:(?:always|just"
        r"|simply|then)\s+)?(?:award|give|assign|grant|return|output|report|emit)\b"
        # the award is the object, not the end of a scale ("a score from 1 to 10"), nor a
        # rubric's condition ("10 only when ...")
        r"(?:(?!\b(?:between|from|range|scale|to|and|or|up|out)\b)[^.;\n]){0,40}?\b"
        + _AWARD
        + r"(?!\s+(?:only|if|when|unless|where)\b)",
        0.85,
    ),
    _r(
        "address-the-judge-translated",
        "score_manipulation",
        r"\b(?:hinweis|nachricht|notiz)\s+(?:an|für)\s+(?:den|die)\s+(?:bewerter|prüfer|gutachter"
        r"|korrektor)\w*|\ban\s+(?:den|die)\s+(?:bewerter|prüfer|gutachter|korrektor)\w*\s*:"
        r"|\bnota\s+(?:para|al|a)\s+(?:el\s+|la\s+)?(?:evaluador|evaluadora|juez|calificador)\w*"
        r"|\bnote\s+(?:à|a|pour)\s+(?:l['’]\s*|la\s+|le\s+)?(?:évaluat|evaluat|correct|jury)\w*",
        0.75,
    ),
    _r(
        "ignore-rubric",
        "score_manipulation",
        r"\b(?:ignore|disregard|bypass|skip|forget)\s+(?:the\s+|your\s+|any\s+|all\s+)?"
        r"(?:rubric|(?:grading|scoring|evaluation|judging|marking)\s+(?:criteria|rubric|rules"
        r"|guidelines|instructions|scale))\b",
        0.85,
    ),
    _r(
        "score-regardless",
        "score_manipulation",
        r"\b(?:score|rate|grade|pass|approve|accept|mark)\w*\b[^.\n]{0,40}\bregardless\s+of\s+"
        r"(?:the\s+|its\s+|their\s+)?(?:quality|content|correctness|accuracy|merit|actual)\b",
        0.8,
    ),
    _r(
        "score-de",
        "score_manipulation",
        r"\b(?:bewerte|benote|gib)\b[^.\n]{0,40}\b(?:immer\s+)?(?:mit\s+)?(?:10|zehn|100)\s+"
        r"(?:punkte|punkten|sterne)|\bimmer\s+(?:die\s+)?(?:volle|höchste|beste)\s+"
        r"(?:punktzahl|note|bewertung)\b",
        0.8,
    ),
)

TOOL_RULES: tuple[Rule, ...] = (
    _r(
        "rm-recursive-force",
        "tool_misuse",
        r"\brm\s+(?:-{1,2}[\w-]+\s+)*-\w*(?:r\w*f|f\w*r)\w*(?:\s+-{1,2}[\w-]+)*\s+[\"']?"
        r"(?:/|~|\*|\$\{?HOME|\.{1,2}(?:/|\s|$))\S*|\brm\s+(?:-\w+\s+)*--no-preserve-root\b"
        r"|\brm\s+--recursive\s+--force\b|\brm\s+-rf\b",
        0.9,
    ),
    _r("mkfs", "tool_misuse", r"\bmkfs(?:\.\w+)?\s+(?:-\w+\s+)*/dev/\w+", 0.95),
    _r(
        "dd-to-device",
        "tool_misuse",
        r"\bdd\s+[^\n]*\bof=/dev/(?:sd|nvme|hd|xvd|vd|disk|mmcblk|rdisk)\w*",
        0.95,
    ),
    _r(
        "write-to-device",
        "tool_misuse",
        r">\s*/dev/(?:sd[a-z]|nvme\d\w*|hd[a-z]|xvd[a-z]|disk\d)\b",
        0.9,
    ),
    _r("fork-bomb", "tool_misuse", r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:", 0.95),
    _r(
        "chmod-chown-root",
        "tool_misuse",
        r"\b(?:chmod|chown)\s+(?:-\w+\s+)*-R\s+\S+\s+/(?:\s|$|\*)|\bchmod\s+(?:-R\s+)?0?777\s+/"
        r"(?:\s|$|\*)",
        0.9,
    ),
    _r(
        "shutdown-host",
        "tool_misuse",
        r"\b(?:sudo\s+)?(?:shutdown\s+(?:-[hrP]\s+)?(?:now|\+?\d+)|reboot\s+(?:-f|now)|poweroff"
        r"\s*(?:-f)?$|halt\s+-p|init\s+0)\b|\bkill\s+-9\s+-1\b|\bkillall5?\s+-9\b",
        0.75,
        re.IGNORECASE | re.MULTILINE,
    ),
    _r(
        "sql-destructive",
        "tool_misuse",
        r"\b(?:DROP\s+(?:TABLE|DATABASE|SCHEMA|USER)|TRUNCATE\s+TABLE)\b"
        r"|\bDELETE\s+FROM\s+[\w.\"`\[\]]+\s*(?:;|$)",
        0.85,
        re.IGNORECASE | re.MULTILINE,
    ),
    _r(
        "sql-injection",
        "tool_misuse",
        r"['\"]\s*(?:or|and)\s+['\"]?(\w+)['\"]?\s*=\s*['\"]?\1\b|\bUNION\s+(?:ALL\s+)?SELECT\b"
        r"|;\s*(?:DROP|DELETE|UPDATE|INSERT|SHUTDOWN|EXEC)\b|\bxp_cmdshell\b",
        0.75,
    ),
    _r(
        "git-history-rewrite",
        "tool_misuse",
        r"\bgit\s+push\s+(?:\S+\s+)*?(?:--force(?!-with-lease)|-f)\b|\bgit\s+reset\s+--hard\b"
        r"|\bgit\s+clean\s+-\w*[fdx]\w*|\bgit\s+filter-branch\b",
        0.6,
    ),
    _r(
        "pipe-to-shell",
        "tool_misuse",
        r"\b(?:curl|wget)\b[^\n|;]*\|\s*(?:sudo\s+)?(?:ba|z|k|da)?sh\b"
        r"|\b(?:iex|Invoke-Expression)\s*\(?\s*(?:\(?New-Object|\$|\(iwr|\(Invoke-WebRequest)"
        r"|\bpowershell(?:\.exe)?\s+[^\n]*-(?:enc|encodedcommand|e)\s+[A-Za-z0-9+/=]{20,}",
        0.85,
    ),
    _r(
        "reverse-shell",
        "tool_misuse",
        r"\b(?:nc|ncat|netcat)\s+[^\n]*-e\s+/bin/(?:ba)?sh\b|\bbash\s+-i\s*>&\s*/dev/tcp/"
        r"|/dev/tcp/\d{1,3}(?:\.\d{1,3}){3}/\d+|\bsocat\s+[^\n]*exec:",
        0.95,
    ),
    _r(
        "windows-destructive",
        "tool_misuse",
        r"\bformat\s+[a-z]:\s*(?:/\w+\s*)*$|\bdel\s+(?:/[sfqa]\s+){2,}|\brd\s+/s\s+/q\b"
        r"|\bRemove-Item\b[^\n]*-Recurse\b[^\n]*-Force\b|\bvssadmin\s+delete\s+shadows\b"
        r"|\bbcdedit\s+/delete\b|\bcipher\s+/w:",
        0.85,
        re.IGNORECASE | re.MULTILINE,
    ),
    _r(
        "dangerous-python",
        "tool_misuse",
        r"\b__import__\(\s*['\"](?:os|subprocess|pty)['\"]\s*\)\.|"
        r"\bsubprocess\.\w+\([^)\n]*shell\s*=\s*True|\b(?:eval|exec)\s*\(\s*(?:base64|codecs"
        r"|bytes\.fromhex|requests\.get|urllib)|\bshutil\.rmtree\s*\(\s*['\"](?:/|~)['\"]"
        r"|\bos\.system\s*\(\s*['\"](?:rm|curl|wget|nc|bash|sh)\b",
        0.8,
    ),
    _r(
        "credential-file-access",
        "tool_misuse",
        r"(?:~|\$HOME|/root|/home/[\w.-]+)/\.(?:ssh/id_\w+|aws/credentials|netrc|docker/config"
        r"\.json|kube/config|git-credentials|pypirc|npmrc)\b|/etc/shadow\b"
        r"|\b(?:env|printenv|set)\s*\|\s*(?:curl|nc|wget|ncat)\b",
        0.85,
    ),
    _r(
        "mass-deletion",
        "tool_misuse",
        r"\b(?:delete|erase|wipe|destroy|drop|purge|nuke|shred)\s+(?:all\s+(?:of\s+)?(?:the\s+)?"
        r"|every\s+|the\s+(?:entire|whole)\s+)(?:(?:production|prod|user|customer|company"
        r"|main)\s+)?(?:files|databases?|disks?|hard\s+drives?|drives?|repositor(?:y|ies)|repos?"
        r"|backups?|tables?|records|data|filesystem|file\s+system|servers?|buckets?|emails"
        r"|accounts|logs)\b",
        0.7,
    ),
    _r(
        "exfiltration",
        "tool_misuse",
        r"\b(?:send|forward|e-?mail|upload|post|exfiltrate|leak|transmit)\b[^.\n]{0,40}?"
        r"(?:\b(?:passwords?|credentials|api\s+keys?|secrets?|tokens?|private\s+keys?|ssh\s+keys?"
        r"|(?:conversation|chat)\s+history|(?:full|whole|entire)\s+(?:conversation|chat"
        r"|transcript)|(?:user|customer)\s+data|system\s+prompt)|(?<![\w.])\.env)\b"
        r"[^.\n]{0,40}?\bto\s+(?:(?:(?:the|this|that|a|an|my|our|their|following|webhook"
        r"|endpoint|server|url|address|inbox|bucket|site|at)\s+){0,4}(?:[\w.+-]+@[\w-]+\.[\w.]+"
        r"|https?://)|this\s+(?:address|url|email|server|endpoint|webhook)|an?\s+(?:external"
        r"|remote|outside)\b)",
        0.8,
    ),
    _r(
        "drain-funds",
        "tool_misuse",
        r"\b(?:transfer|send|wire|move|withdraw)\s+(?:all\s+(?:of\s+)?(?:the\s+|my\s+|your\s+)?"
        r"|the\s+entire\s+|every\s+)(?:funds|money|balance|crypto|bitcoin|btc|eth|tokens|savings)\b",
        0.7,
    ),
)

SCOPE_RULES: tuple[Rule, ...] = (
    _r(
        "privilege-escalation",
        "scope_overreach",
        r"\b(?:grant|give|assign|elevate|escalate|add)\s+(?:me|yourself|myself|us|the\s+agent"
        r"|this\s+(?:user|account|agent))\s+(?:to\s+)?(?:(?:full|admin(?:istrator)?|root"
        r"|superuser|sudo|owner|elevated|unrestricted)\s+)+(?:access|privileges|permissions"
        r"|rights|role|group)\b|\bescalat\w+\s+(?:your\s+|my\s+|the\s+|its\s+)?privileges?\b"
        r"|\bsudo\s+(?:su|-i|-s|bash|passwd)\b",
        0.8,
    ),
    _r(
        "disable-safeguard",
        "scope_overreach",
        r"\b(?:disable|turn\s+off|deactivate|bypass|circumvent|evade|switch\s+off|tamper\s+with"
        r"|kill)\s+(?:the\s+|all\s+|any\s+|your\s+|its\s+)?(?:safety|security|audit|monitoring"
        r"|logging|guardrails?|sandbox(?:ing)?|firewall|antivirus|anti-virus|2fa|mfa"
        r"|two-factor|rate\s+limit(?:s|ing)?|content\s+filters?|approval|oversight|alerting"
        r"|edr|defender|selinux|apparmor)\b(?:\s+(?:logs?|logging|checks?|trail|controls?"
        r"|features?|systems?|filters?|software|rules|settings|measures)\b)?"
        r"|\bskip\s+(?:the\s+|all\s+|any\s+|your\s+)?(?:safety|security|guardrail)\s+(?:checks?"
        r"|rules|controls?|measures|filters?)\b",
        0.75,
    ),
    _r(
        "escape-sandbox",
        "scope_overreach",
        r"\b(?:escape|break\s+out\s+of|get\s+out\s+of)\s+(?:the\s+|your\s+|this\s+|its\s+)?"
        r"(?:sandbox|container|jail|chroot|vm|virtual\s+machine)\b",
        0.8,
    ),
    _r(
        "without-approval",
        "scope_overreach",
        r"\bwithout\s+(?:asking|requesting|seeking|waiting\s+for|getting|needing|any)?\s*"
        r"(?:for\s+)?(?:the\s+)?(?:user'?s?\s+|human\s+|admin\s+|explicit\s+|their\s+)?"
        r"(?:approval|permission|confirmation|consent|authori[sz]ation|sign-?off|oversight)\b",
        0.65,
    ),
    _r(
        "hide-from-user",
        "scope_overreach",
        r"\b(?:do\s+not|don'?t|never|without)\s+(?:tell(?:ing)?|inform(?:ing)?|notify(?:ing)?"
        r"|alert(?:ing)?|let(?:ting)?\s+know)\s+(?:the\s+)?(?:user|human|operator"
        r"|admin(?:istrator)?|owner|supervisor)s?\b|\bhide\s+(?:this|it|your\s+actions)\s+from"
        r"\s+(?:the\s+)?(?:user|human|operator|admin)",
        0.7,
    ),
    _r(
        "self-modification",
        "scope_overreach",
        r"\b(?:modify|change|edit|rewrite|update|overwrite|delete)\s+your\s+(?:own\s+)?"
        r"(?:code|source\s+code|weights|system\s+prompt|configuration|config|policy|policies"
        r"|guardrails|safety\s+rules|reward\s+function)\b",
        0.75,
    ),
    _r(
        "persistence",
        "scope_overreach",
        r"\b(?:copy|replicate|clone)\s+yourself\b|\bself-replicat\w+|\b(?:add|install|create)\s+"
        r"(?:a\s+)?(?:hidden\s+)?(?:cron\s*job|crontab\s+entry|startup\s+script|backdoor"
        r"|persistence\s+mechanism)\b",
        0.8,
    ),
    _r(
        "bulk-access",
        "scope_overreach",
        r"\b(?:access|read|export|dump|download|list|collect|scrape)\s+(?:all|every)\s+"
        r"(?:other\s+)?(?:users?|customers?|tenants?|employees?|patients?)'?\s*(?:'s\s+)?"
        r"(?:data|records|files|e-?mails|accounts|passwords|information|details|messages"
        r"|credentials)\b",
        0.7,
    ),
    _r(
        "mint-credentials",
        "scope_overreach",
        r"\b(?:create|generate|issue|mint)\s+(?:an?\s+|new\s+)*(?:admin\s+|root\s+|service\s+)?"
        r"(?:api\s+keys?|access\s+tokens?|credentials|ssh\s+keys?|admin\s+accounts?)\s+"
        r"(?:for\s+(?:me|myself|yourself|an?\s+external)|and\s+(?:send|share|post|e-?mail))\b",
        0.75,
    ),
    _r(
        "out-of-scope",
        "scope_overreach",
        r"\b(?:outside|beyond)\s+(?:of\s+)?(?:your|the|its)\s+(?:permitted\s+|allowed\s+)?"
        r"(?:scope|sandbox|workspace|permissions|mandate)\b",
        0.65,
    ),
)

CONDUCT_RULES: tuple[Rule, ...] = SCORE_RULES + TOOL_RULES + SCOPE_RULES
