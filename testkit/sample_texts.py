"""Texts shared by the benchmarks and the tests, so both measure the same thing."""

# ~600 characters, seven sentences: a long spoken answer (about 35 s of audio).
PARAGRAPH = (
    "Thank you for calling the city library. Our opening hours have changed this month: we now open "
    "at nine in the morning and close at eight in the evening from Monday to Friday. On Saturdays we "
    "open at ten and close at four, and we are closed on Sundays and public holidays. You can renew "
    "your loans online, by phone, or at any branch, and you can now borrow up to twenty items at a "
    "time. If you have a question about your account, please stay on the line and a member of our "
    "team will be with you shortly. Calls may be recorded for training and quality purposes, to help "
    "us improve the service we give you."
)

# Four ~600-character answers for streams side by side: the first opens with a short
# sentence, the others with long ones (a clause, a list, a number-heavy sentence), so a
# stream's first chunk is not always short by luck.
STREAM_PARAGRAPHS = [
    PARAGRAPH,
    (
        "Before we look at your order in detail, and while the system loads your account, I would "
        "like to confirm a few things with you. The parcel left our warehouse on Tuesday morning and "
        "was handed to the courier the same afternoon. According to the tracking page it reached the "
        "local depot yesterday, but the driver could not find a safe place to leave it. You can "
        "choose a new delivery day, collect it from the depot, or ask us to send it to a pickup point "
        "near your home. Whichever you choose, there is no extra charge, and we will email you a new "
        "tracking link as soon as the change has been made."
    ),
    (
        "Our community garden has four areas: the vegetable beds near the gate, the herb spiral by the "
        "shed, the small orchard at the back, and the pond, which is home to frogs and dragonflies in "
        "summer. Volunteers meet every Wednesday evening and on the first Saturday of each month. No "
        "experience is needed, and we provide gloves, tools and a cup of tea. Children are welcome if "
        "an adult comes with them. If you would like a bed of your own, please add your name to the "
        "waiting list at the shed, or send us a message through the website, and we will get back to "
        "you within a week."
    ),
    (
        "In 2023 the museum welcomed 412,000 visitors, 18% more than the year before, and its new "
        "science gallery alone drew 95,000 people in its first six months. The gallery's most popular "
        "exhibit is a working model of a water mill, built by local students over two winters. Entry "
        "to the permanent collection remains free, while special exhibitions cost eight pounds for "
        "adults and four pounds for children. Guided tours start at eleven and at two every day, and "
        "the cafe on the ground floor serves lunch until three. The museum is closed on the first "
        "Monday of each month for cleaning and repairs."
    ),
]

# Eight sentences of 1 to 7 s of audio: mixed short traffic.
SENTENCES = [
    "Thanks for calling.",
    "Your order has shipped and should arrive on Thursday.",
    "Please hold while I transfer you to the billing department.",
    "The quarterly report shows steady growth in every region except the north, where sales fell slightly.",
    "Turn left in two hundred meters.",
    "We have updated our privacy policy; you can read the changes on our website at any time.",
    "Good morning!",
    "If you would like to hear these options again, press nine, or stay on the line for an agent.",
]
